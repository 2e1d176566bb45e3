import Foundation
import JSON
import Testing
import TestSupport

/// `iap-ingest` under a flood of the bodies that cost it the most, measured by `iap-harness bench ingest-memory` on the
/// real process (its own VmHWM and VmRSS): 250 notifications at once stay under the 128 MiB the deployment gives a
/// replica, and after them and after as many submissions of nested arrays its memory goes back near where it was. No
/// broker: each accepted request is held until the publish times out, the longest a request can stay.
///
/// A submission's peak is not held to 128 MiB here: a submission may be as large as `--max-body-bytes` (256 KiB), so its
/// peak follows how many of those bodies are being read at once, which the machine's load decides.
@Suite(.timeLimit(.minutes(5)))
struct IngestMemoryTests {
    @Test func twoHundredFiftyCostliestNotificationsAtOnceStayUnder128MiBAndTheMemoryComesBack() async throws {
        let kinds = ["notification-values", "notification-payload", "submission-values"]
        let arguments = ["bench", "ingest-memory", "--requests", "250", "--publish-timeout", "8", "--json"] + kinds.flatMap { ["--body", $0] }
        let (status, output) = try await offPool { try runCommand(ExecutableProcess.binary("iap-harness").path, arguments) }
        #expect(status == 0, "\(output)")
        let report = try #require(output.split(separator: "\n").last.flatMap { JSONValue.parse(Array($0.utf8))?.objectValue }, "\(output)")
        let bodies = report["bodies"]?.arrayValue?.compactMap(\.objectValue) ?? []
        #expect(bodies.compactMap { $0["body"]?.stringValue } == kinds)
        for body in bodies {
            let name = body["body"]?.stringValue ?? "?"
            // A figure that happens to be whole is written as an integer.
            func mib(_ key: String) -> Double {
                switch body[key] {
                case .number(let number)?: number
                case .integer(let integer)?: Double(integer)
                default: .nan
                }
            }
            #expect(mib("afterMiB") <= mib("baselineMiB") + 10, "\(name): the memory comes back near where it was: \(body)")
            if name.hasPrefix("notification") {
                #expect(mib("peakMiB") < 128, "\(name): the peak stays under the replica's limit: \(body)")
                // Each was accepted (the unreachable broker answers it 503), and all were with the ingest at once.
                #expect(body["statuses"] == .object(["503": .integer(250)]), "\(name): \(body)")
                #expect(body["allInFlightAtOnce"] == .bool(true), "\(name): \(body)")
            } else {
                #expect(body["statuses"] == .object(["400": .integer(250)]), "\(name): refused as it parses: \(body)")
            }
        }
    }
}

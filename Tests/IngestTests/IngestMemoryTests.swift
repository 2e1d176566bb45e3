import Foundation
import JSON
import Testing
import TestSupport

/// `iap-ingest` under a flood of the bodies that cost it the most, measured by `iap-harness bench ingest-memory` on the
/// real process (its own VmHWM and VmRSS) started with the settings the deployments give it: 250 of each costliest body
/// (256 notifications of 256 KiB), each sent in two writes with its last byte held back, stay under 96 MiB, three
/// quarters of the 128 MiB the Kubernetes manifest gives a replica, and afterwards its memory goes back near where it was.
/// No broker: each accepted request is held until the publish times out, the longest a request can stay. What finds no
/// room in the body budget is answered 503 with `Retry-After` (as is what the absent broker never acknowledged).
@Suite(.timeLimit(.minutes(6)))
struct IngestMemoryTests {
    @Test func floodsOfTheCostliestBodiesStayUnder96MiBAndTheMemoryComesBack() async throws {
        let kinds = ["notification-values", "notification-payload", "notification-oversized", "submission-values"]
        let arguments = ["bench", "ingest-memory", "--publish-timeout", "8", "--json"] + kinds.flatMap { ["--body", $0] }
        let (status, output) = try await offPool { try runCommand(ExecutableProcess.binary("iap-harness").path, arguments) }
        #expect(status == 0, "\(output)")
        let report = try #require(output.split(separator: "\n").last.flatMap { JSONValue.parse(Array($0.utf8))?.objectValue }, "\(output)")
        let bodies = report["bodies"]?.arrayValue?.compactMap(\.objectValue) ?? []
        #expect(bodies.compactMap { $0["body"]?.stringValue } == kinds)
        for body in bodies {
            let name = body["body"]?.stringValue ?? "?"
            // A figure that happens to be whole is written as an integer.
            func figure(_ key: String) -> Double {
                switch body[key] {
                case .number(let number)?: number
                case .integer(let integer)?: Double(integer)
                default: .nan
                }
            }
            func answered(_ status: Int) -> Int { Int(body["statuses"]?.objectValue?[String(status)]?.int64Value ?? 0) }
            #expect(figure("afterMiB") <= figure("baselineMiB") + 10, "\(name): the memory comes back near where it was: \(body)")
            #expect(figure("peakMiB") <= 96, "\(name): the peak stays within three quarters of the replica's limit: \(body)")
            #expect(figure("healthzAnswered") > 0, "\(name): /healthz answered during the flood: \(body)")
            switch name {
            case "notification-oversized":
                #expect(answered(413) == 256, "refused on its Content-Length: \(body)")
            case "submission-values":
                // Those with room in the budget are refused as they parse; the others find none.
                #expect(answered(400) > 0 && answered(400) + answered(503) == 250 && Int(figure("retryAfter")) == answered(503), "\(name): \(body)")
            default:
                // Accepted and never acknowledged by the absent broker, or no room in the budget: 503 with Retry-After alike.
                #expect(answered(503) == 250 && Int(figure("retryAfter")) == 250, "\(name): \(body)")
            }
        }
    }
}

import Foundation
import JSON
import Testing
import TestSupport

/// `iap-harness bench codec`: it runs from the schemas' examples and reports every event of a purchase's walk
/// (what it reports is measured, not checked here: speed lives in the command, not in a test).
struct BenchCodecCommandTests {
    @Test func reportsEachEventOfAPurchasesWalk() async throws {
        // Waited for off the cooperative pool: the tests running beside it need its threads.
        let (status, text) = try await offPool {
            try runCommand(ExecutableProcess.binary("iap-harness").path, ["bench", "codec", "--rounds", "1", "--json"],
                           environment: ["IAP_SCHEMAS_DIR": TestServices.packageRoot.appendingPathComponent("schemas").path])
        }
        #expect(status == 0, "\(text)")
        let report = try #require(text.split(separator: "\n").last.flatMap { JSONValue.parse(Array($0.utf8))?.objectValue }, "\(text)")
        let events = report["events"]?.arrayValue?.compactMap(\.objectValue) ?? []
        #expect(events.compactMap { $0["event"]?.stringValue } == ["purchase.submitted", "purchase.verified", "item.granted", "transaction.finished"])
        for event in events {
            #expect((event["bytes"]?.int64Value ?? 0) > 0, "\(event)")
            for figure in ["decodeMicroseconds", "encodeMicroseconds", "foundationParseMicroseconds"] {
                // A figure that happens to be whole is written as an integer.
                let value: Double? = switch event[figure] {
                case .number(let number)?: number
                case .integer(let integer)?: Double(integer)
                default: nil
                }
                #expect((value ?? 0) > 0, "\(figure) in \(event)")
            }
        }
    }
}

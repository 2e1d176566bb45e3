import Foundation
import JSON
import Testing
import TestSupport

/// `iap-harness bench reconcile`: one pass over a stand-in history reads every page and publishes only what was not
/// handled (its times are measured, not checked here).
@Suite(TestServices.broker) struct BenchReconcileCommandTests {
    @Test func onePassReadsEveryPageAndPublishesWhatWasNotHandled() async throws {
        let servers = try TestServices.requireBrokers()
        let (status, text) = try await offPool {
            try runCommand(ExecutableProcess.binary("iap-harness").path,
                           ["bench", "reconcile", "--notifications", "40", "--seen-share", "0.75", "--brokers", servers, "--json"],
                           environment: ["IAP_SCHEMAS_DIR": TestServices.packageRoot.appendingPathComponent("schemas").path])
        }
        #expect(status == 0, "\(text)")
        let report = try #require(text.split(separator: "\n").last.flatMap { JSONValue.parse(Array($0.utf8))?.objectValue }, "\(text)")
        #expect(report["pages"] == .integer(2) && report["published"] == .integer(10) && report["handledBefore"] == .integer(30), "\(report)")
        #expect(report["at1MillionADay"]?.objectValue?["callsPerPass"] == .integer(2605), "52,083 notifications a pass, 20 a page")
    }
}

import Foundation
import JSON
import Testing
import TestSupport

/// `iap-harness chaos` end to end, small: the four workers and the ingest as processes on the broker and PostgreSQL, each
/// worker killed once, and Google Play's real-time developer notifications pushed to the ingest among the purchases.
/// Asked for (`IAP_TEST_CHAOS=1`): two cores' worth of processes for a minute and more, which starves the rest of the
/// suite's waits when it runs among them; `make chaos` runs a larger one.
@Suite(TestServices.broker, TestServices.postgres, .enabled(if: ProcessInfo.processInfo.environment["IAP_TEST_CHAOS"] != nil, "IAP_TEST_CHAOS=1 runs it"),
       .timeLimit(.minutes(8)))
struct ChaosCommandTests {
    @Test func theBooksBalanceWithGooglePlayNotificationsPushedToTheIngest() async throws {
        let command = ["chaos", "--brokers", try TestServices.requireBrokers(), "--store", try await StoreEngine.postgres.freshURL(),
                       "--purchases", "1000", "--users", "100", "--kills-per-worker", "1", "--replicas", "none",
                       "--googleplay-notifications", "0.4", "--trapping", "1", "--json"]
        let (status, text) = try await offPool {
            try runCommand(ExecutableProcess.binary("iap-harness").path, command,
                           environment: ["IAP_SCHEMAS_DIR": TestServices.packageRoot.appendingPathComponent("schemas").path])
        }
        let summary = try #require(text.split(separator: "\n").last.flatMap { JSONValue.parse(Array($0.utf8))?.objectValue }, "\(text)")
        #expect(status == 0, "\(text.suffix(4000))")
        #expect(summary["violations"] == .array([]))
        // The submission that traps the verifier: two traps, then dead-lettered crashedWorker.
        #expect(summary["trapping"] == .integer(1) && summary["crashedWorker"] == .integer(1), "\(summary)")
        #expect(summary["trapRestarts"] == .integer(2), "\(summary)")
        // 1,000 messages: 785 valid purchases, every sixth Google Play coins and every sixth Google Play ad-free (251), of which
        // 0.4 is announced (100): a third before the submissions (34), one in four pushed twice (25). 5 % of the Google Play
        // coins (126) paid and never submitted (7): four with their buyer's token, three without.
        let notifications = try #require(summary["googlePlayNotifications"]?.objectValue, "\(summary)")
        let only = try #require(notifications["onlyAnnounced"]?.objectValue)
        #expect(notifications["announced"] == .integer(100))
        #expect(notifications["beforeSubmission"] == .integer(34))
        #expect(notifications["afterGrant"] == .integer(66))
        #expect(notifications["duplicated"] == .integer(25))
        #expect(only["withToken"] == .integer(4))
        #expect(only["withoutToken"] == .integer(3))
        #expect(notifications["pushed"] == .integer(100 + 25 + 4 + 3), "each acknowledged by the ingest: \(notifications)")
        #expect(notifications["undelivered"] == .integer(0))
        // How they ended: each announced purchase granted once and completed at Google once; the charges only Google announced
        // granted to their token's user, or flagged unclaimed.
        #expect(notifications["announcedCompletedOnce"] == .integer(100))
        #expect(only["grantedByToken"] == .integer(4))
        #expect(only["flaggedUnclaimed"] == .integer(3))
        #expect(summary["googlePlay"] == .object(["purchases": .integer(251), "completedOnce": .integer(251)]))
    }
}

import Foundation
import JSON
import Testing
import TestSupport

/// `iap-harness chaos` end to end, small: the four workers and the ingest as processes on the broker and PostgreSQL, each
/// worker killed once, Google Play's real-time developer notifications pushed to the ingest among the purchases, and web
/// purchases through Stripe, some refunded or disputed, their events delivered by webhook or lost.
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
        // 1,000 messages: 785 valid purchases, every eighth Google Play coins and every eighth Google Play ad-free (188), of which
        // 0.4 is announced (75): a third before the submissions (25), one in four pushed twice (19). 5 % of the Google Play
        // coins (94) paid and never submitted (5): three with their buyer's token, two without.
        let notifications = try #require(summary["googlePlayNotifications"]?.objectValue, "\(summary)")
        let only = try #require(notifications["onlyAnnounced"]?.objectValue)
        #expect(notifications["announced"] == .integer(75))
        #expect(notifications["beforeSubmission"] == .integer(25))
        #expect(notifications["afterGrant"] == .integer(50))
        #expect(notifications["duplicated"] == .integer(19))
        #expect(only["withToken"] == .integer(3))
        #expect(only["withoutToken"] == .integer(2))
        #expect(notifications["pushed"] == .integer(75 + 19 + 3 + 2), "each acknowledged by the ingest: \(notifications)")
        #expect(notifications["undelivered"] == .integer(0))
        // How they ended: each announced purchase granted once and completed at Google once; the charges only Google announced
        // granted to their token's user, or flagged unclaimed.
        #expect(notifications["announcedCompletedOnce"] == .integer(75))
        #expect(only["grantedByToken"] == .integer(3))
        #expect(only["flaggedUnclaimed"] == .integer(2))
        #expect(summary["googlePlay"] == .object(["purchases": .integer(188), "completedOnce": .integer(188)]))
        // Web purchases through Stripe, every eighth coins and every eighth ad-free (188): the books above hold them granted once,
        // the coins finished by the app's report (some overtaking their grant), the stale ones flagged once at their deadline.
        let web = try #require(summary["stripe"]?.objectValue, "\(summary)")
        #expect(web["purchases"] == .integer(188), "\(web)")
        #expect((web["consumptionReports"]?.int64Value ?? 0) + (web["flaggedAtDeadline"]?.int64Value ?? 0) == 94, "\(web)")
        // Stripe's decisions among them while the faults happen: one in twenty-five refunded (7), two disputes lost and two won,
        // each opened and closed (15 events). Every other refund's event lost (3), and of the disputes, in the order opened,
        // the first's closing, the second's opening (a won dispute, closed at once: its closing handled first), and both of the
        // fourth's (4): read back by the sweeper's reconciliation. The 8 delivered by a signed webhook, every third twice (11).
        // Each purchase ends as its last decision left it (the books hold what each gave taken back once, or given back).
        #expect(web["refunded"] == .integer(7) && web["disputesLost"] == .integer(2) && web["disputesWon"] == .integer(2), "\(web)")
        #expect(web["events"] == .integer(15) && web["lost"] == .integer(7) && web["duplicated"] == .integer(3), "\(web)")
        #expect(web["delivered"] == .integer(11) && web["undelivered"] == .integer(0), "\(web)")
        #expect(web["settled"] == .integer(11) && web["unhandled"] == .integer(0), "every decision held and every event handled: \(web)")
        // The won disputes' purchases given back (no App Store refund is reversed in a run this small: one refund a round).
        #expect(summary["restored"] == .integer(2), "\(summary)")
    }
}

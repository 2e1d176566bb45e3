import Foundation
import JSON
import Testing
import TestSupport

/// `iap-harness demo` end to end: the four worker executables as processes on the broker, and the books.
@Suite(TestServices.broker, .timeLimit(.minutes(8)))
struct DemoCommandTests {
    /// Runs `iap-harness demo --json` with `arguments` on the test broker; returns its exit status and the JSON summary.
    func demo(_ arguments: [String]) async throws -> (status: Int32, summary: [String: JSONValue], output: String) {
        let command = ["demo", "--brokers", try TestServices.requireBrokers(), "--json"] + arguments
        let (status, text) = try await offPool {
            try runCommand(ExecutableProcess.binary("iap-harness").path, command,
                           environment: ["IAP_SCHEMAS_DIR": TestServices.packageRoot.appendingPathComponent("schemas").path])
        }
        let summary = try #require(text.split(separator: "\n").last.flatMap { JSONValue.parse(Array($0.utf8))?.objectValue }, "\(text)")
        return (status, summary, text)
    }

    @Test func theBooksBalanceWithTheWorkersAsProcesses() async throws {
        let (status, summary, text) = try await demo(["--purchases", "200", "--users", "20"])
        #expect(status == 0, "\(text)")
        #expect(summary["violations"] == .array([]))
        // 200 submissions: 10 duplicates, 4 restores, 4 forged, 1 malformed, 2 left unconsumed.
        #expect(summary["granted"] == .integer(181))
        #expect(summary["alreadyGranted"] == .integer(14))
        #expect(summary["rejected"] == .integer(4))
        #expect(summary["deadLettered"] == .integer(1))
        #expect(summary["refundDue"] == .integer(2))
        #expect(summary["revoked"] == .integer(1))
        #expect(summary["finished"] == .integer(178))
        // The second act: what was bought decides what happens; every user's holdings read back over HTTP.
        let types = summary["productTypes"]?.objectValue ?? [:]
        #expect(types["nonConsumable"] == .object(["finished": .integer(1), "revoked": .integer(1)]),
                "ad-free finished at its grant, never flagged, moved by the restore; the web player's revoked by a dispute")
        #expect(types["autoRenewable"] == .object(["finished": .integer(9)]), "six subscriptions and three renewals (one on Google Play), never flagged")
        #expect(types["consumable"] == .object(["finished": .integer(183), "granted": .integer(4), "refund_due": .integer(2), "revoked": .integer(4),
                                                "unclaimed": .integer(1)]),
                "only unconsumed consumables flagged; three refunds and a web pack's; a known token's charge granted, the other unclaimed; the restored two and the second game's hints granted")
        #expect(summary["holdingsReadBack"] == .integer(37), "20 users and 17 stories")
        // The fourth act: a game sold on Google Play alone beside the App Store, AppCoins and web one, and a second game, each counted by app;
        // the fifth act's two web purchases are the demo game's.
        #expect(summary["purchasesByAppAndStore"] == .object([
            "coins-game": .object(["appstore": .integer(198), "appcoins": .integer(1), "stripe": .integer(2)]),
            "android-coins": .object(["googleplay": .integer(3)]),
            "puzzle": .object(["appstore": .integer(1)]),
        ]))
        // The third act: the webhook was down; one pass over the store's history recovers every lost notification, once.
        #expect(summary["webhookDown"]?.objectValue?["lost"] == .integer(6))
        #expect(summary["webhookDown"]?.objectValue?["recovered"] == .integer(6))
        #expect(summary["webhookDown"]?.objectValue?["secondPassRecovered"] == .integer(0))
        // The fifth act: a web refund whose webhook was lost, published by one pass over Stripe's events, once.
        #expect(summary["webPurchases"] == .object(["recovered": .integer(1), "secondPassRecovered": .integer(0)]))
    }

    /// Workers killed with SIGKILL mid-stream and restarted: redelivered inputs are answered again, and the
    /// books still balance (each purchase granted once, balances exact).
    @Test func theBooksBalanceWhenWorkersAreKilledMidStream() async throws {
        let (status, summary, text) = try await demo(["--purchases", "200", "--users", "20", "--kill-workers"])
        #expect(status == 0, "\(text)")
        #expect(summary["violations"] == .array([]))
        #expect(summary["workersKilled"] == .integer(3))
        #expect(summary["finished"] == .integer(178))
        #expect(summary["refundDue"] == .integer(2))
    }
}

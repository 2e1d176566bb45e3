import Foundation
import JSON
import StoreFixtures
import Testing
import TestSupport

/// `iapctl produce`, `submit` and `tail` against the broker, as an operator would use them.
@Suite(TestServices.broker, .timeLimit(.minutes(3)))
struct ProduceCommandsTests {
    @Test func producePublishesValidLinesOnlyAndTailShowsThem() async throws {
        let servers = try TestServices.requireBrokers()
        let prefix = "cli\(UUID().uuidString.prefix(6).lowercased())."
        let consumed = prefix + "iap.purchase.consumed"
        let submitted = prefix + "iap.purchase.submitted"
        #expect(try await VerifyCommandTests.run(["topics", "create", consumed, submitted, "--partitions", "1", "--brokers", servers], input: "").status == 0)

        let lines = """
            {"store":"appcoins","transactionId":"o-1","userId":"u-1","consumedAt":"2026-11-29T10:00:00Z"}
            {"store":"appcoins","transactionId":"o-2","userId":"u-1"}
            {"store":"appstore","transactionId":"2000","userId":"u-2","consumedAt":"2026-11-29T10:00:01Z"}
            """
        let produced = try await VerifyCommandTests.run(["produce", "--topic", consumed, "--topic-prefix", prefix, "--brokers", servers], input: lines)
        #expect(produced.status == 1, "one line was invalid")
        #expect(produced.lines.last == "published 2, invalid 1, failed 0")

        let jws = try JWSSigner(pki: try TestPKI.make()).sign(AppStorePayloads.transaction(transactionId: "1", productId: "coins.100", bundleId: "b"))
        let submit = try await VerifyCommandTests.run(["submit", "--store", "appstore", "--kind", "signedTransaction", "--user", "u-9", "--source", "client",
                                                 "--topic-prefix", prefix, "--brokers", servers], input: jws)
        #expect(submit.status == 0)
        #expect(submit.lines.last?.contains("to \(submitted)[0]@0") == true, "\(submit.lines)")
        #expect(try await VerifyCommandTests.run(["submit", "--store", "appstore", "--kind", "signedTransaction", "--user", "", "--brokers", servers],
                                           input: jws).status == 2, "an empty user is refused before publishing")

        let tail = try await VerifyCommandTests.run(["tail", "--topic", consumed, "--from-beginning", "--max", "2", "--brokers", servers], input: "")
        let events = tail.lines.compactMap { JSONValue.parse(Array($0.utf8))?.objectValue }
        #expect(events.count == 2)
        #expect(events.map { $0["value"]?.objectValue?["transactionId"] } == [.string("o-1"), .string("2000")])
        #expect(events.allSatisfy { $0["headers"]?.objectValue?["ce_type"] == .string("iap.purchase.consumed.v1") })
        #expect(events.first?["key"] == .string("u-1"), "keyed by user")
    }
}

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

        // A file written on Windows: CRLF line ends, a blank line, a line that is not UTF-8, no newline at the end.
        var crlf = Data("{\"store\":\"appcoins\",\"transactionId\":\"o-3\",\"userId\":\"u-3\",\"consumedAt\":\"2026-11-29T10:00:02Z\"}\r\n\r\n".utf8)
        crlf.append(contentsOf: [0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x3A, 0x31, 0x7D, 0x0D, 0x0A]) // {"\xFF\xFE":1}
        crlf.append(Data("  {\"store\":\"appcoins\",\"transactionId\":\"o-4\",\"userId\":\"u-4\",\"consumedAt\":\"2026-11-29T10:00:03Z\"}\t".utf8))
        let fromWindows = try await VerifyCommandTests.run(["produce", "--topic", consumed, "--topic-prefix", prefix, "--brokers", servers], input: crlf)
        #expect(fromWindows.status == 1, "the line that is not UTF-8 is invalid")
        #expect(fromWindows.lines.last == "published 2, invalid 1, failed 0", "\(fromWindows.lines)")

        let jws = try JWSSigner(pki: try TestPKI.make()).sign(AppStorePayloads.transaction(transactionId: "1", productId: "coins.100", bundleId: "b"))
        let submit = try await VerifyCommandTests.run(["submit", "--store", "appstore", "--kind", "signedTransaction", "--user", "u-9", "--source", "client",
                                                 "--topic-prefix", prefix, "--brokers", servers], input: jws)
        #expect(submit.status == 0)
        #expect(submit.lines.last?.contains("to \(submitted)[0]@0") == true, "\(submit.lines)")
        #expect(try await VerifyCommandTests.run(["submit", "--store", "appstore", "--kind", "signedTransaction", "--user", "", "--brokers", servers],
                                           input: jws).status == 2, "an empty user is refused before publishing")

        let tail = try await VerifyCommandTests.run(["tail", "--topic", consumed, "--from-beginning", "--max", "4", "--timeout", "60", "--brokers", servers], input: "")
        let events = tail.lines.compactMap { JSONValue.parse(Array($0.utf8))?.objectValue }
        #expect(events.count == 4)
        #expect(events.map { $0["value"]?.objectValue?["transactionId"] } == [.string("o-1"), .string("2000"), .string("o-3"), .string("o-4")])
        #expect(events.last?["key"] == .string("u-4"))
        #expect(events.allSatisfy { $0["headers"]?.objectValue?["ce_type"] == .string("iap.purchase.consumed.v1") })
        #expect(events.first?["key"] == .string("u-1"), "keyed by user")
    }

    /// `iapctl adjust`: an operator's adjustment as the granter reads it (the topic's schema), or a usage error.
    @Test func adjustPublishesAnAdjustmentTheSchemaAccepts() async throws {
        let servers = try TestServices.requireBrokers()
        let prefix = "adj\(UUID().uuidString.prefix(6).lowercased())."
        let topic = prefix + "iap.user.adjustment"
        #expect(try await VerifyCommandTests.run(["topics", "create", topic, "--partitions", "1", "--brokers", servers], input: "").status == 0)
        let common = ["adjust", "--user", "player-7", "--id", "ticket-1", "--by", "support:ana", "--reason", "outage", "--topic-prefix", prefix, "--brokers", servers]
        let published = try await VerifyCommandTests.run(common + ["--currency", "coins=500", "--entitlement", "vip@2027-01-01T00:00:00Z"], input: "")
        #expect(published.status == 0 && published.lines.last?.contains("adjustment:ticket-1 to \(topic)[0]@0") == true, "\(published.lines)")
        let tail = try await VerifyCommandTests.run(["tail", "--topic", topic, "--from-beginning", "--max", "1", "--timeout", "30", "--brokers", servers], input: "")
        let event = try #require(tail.lines.last.flatMap { JSONValue.parse(Array($0.utf8)) }?.objectValue?["value"]?.objectValue, "\(tail.lines)")
        #expect(event["items"] == .array([.object(["kind": .string("currency"), "code": .string("coins"), "amount": .integer(500)]),
                                          .object(["kind": .string("entitlement"), "code": .string("vip"), "expiresAt": .string("2027-01-01T00:00:00.000Z")])]))
        #expect(event["requestedBy"] == .string("support:ana") && event["userId"] == .string("player-7"))
        for wrong in [["--currency", "coins=0"], ["--currency", "coins"], ["--reverse", "t-0", "--currency", "coins=5"], []] {
            #expect(try await VerifyCommandTests.run(common + wrong, input: "").status == 2, "\(wrong)")
        }
    }
}

import Foundation
import PurchaseDomain
import PurchaseStore
import Testing
import TestSupport

/// A store holding one currency in two Unicode spellings (`café` precomposed and decomposed: rows an older release
/// wrote, whose catalogs took them as one): `iapctl user`, the ingest's read side and `iapctl books` show both balances,
/// each under its own bytes, where a map keyed by `String` kept one.
@Suite struct ItemCodeSpellingCommandTests {
    static let (precomposed, decomposed): (ItemCode, ItemCode) = ("caf\u{E9}", "cafe\u{301}")
    /// Both members, in the order of their bytes (`e` 0x65 before `é` 0xC3).
    static let bothBalances = Array("{\"cafe\u{301}\":5,\"caf\u{E9}\":7}".utf8)

    static func contains(_ text: String, _ bytes: [UInt8]) -> Bool {
        let text = Array(text.utf8)
        return text.count >= bytes.count && (0...(text.count - bytes.count)).contains { text[$0..<($0 + bytes.count)].elementsEqual(bytes) }
    }

    @Test(arguments: StoreEngine.available) func bothSpellingsOfACurrencyAreShownApart(_ engine: StoreEngine) async throws {
        let url = try await engine.freshURL()
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        let now = Date()
        for (id, code, amount) in [("s-1", Self.precomposed, Int64(7)), ("s-2", Self.decomposed, Int64(5))] {
            let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: TransactionID(id)), userId: "player-s", productId: "cafe.pack",
                                        productType: .consumable, quantity: 1, purchaseTime: now)
            _ = try await store.recordVerified(record, at: now)
            _ = try await store.grant(record.key, items: [.currency(code, amount)], at: now)
        }
        #expect(try await store.balances(of: "player-s") == [Self.precomposed: 7, Self.decomposed: 5])

        let user = try await VerifyCommandTests.run(["user", "player-s", "--store", url], input: "")
        let line = try #require(user.lines.last, "\(user.lines)")
        #expect(user.status == 0 && Self.contains(line, Array(#""balances":"#.utf8) + Self.bothBalances), "\(line)")

        let ingest = try ExecutableProcess("iap-ingest", ["--brokers", "127.0.0.1:1", "--http-port", "0", "--http-host", "127.0.0.1", "--read-side", "--store", url],
                                           environment: ["IAP_INGEST_READ_SECRET": ""])
        let answer = try await httpRequest("http://127.0.0.1:\(try await ingest.httpPort())/v1/users/player-s")
        #expect(answer.status == 200 && Array(answer.body.utf8) == Array(line.utf8), "the app's answer is the operator's, byte for byte: \(answer.body)")
        #expect(try await ingest.terminate() == 0)

        let books = try await VerifyCommandTests.run(["books", "--store", url], input: "")
        let report = try #require(books.lines.last, "\(books.lines)")
        #expect(books.status == 0 && Self.contains(report, Array(#""balanced":true"#.utf8)), "\(report)")
        #expect(Self.contains(report, Array(#""currencyTotals":"#.utf8) + Self.bothBalances), "\(report)")
    }
}

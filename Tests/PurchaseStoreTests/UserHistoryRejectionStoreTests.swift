import Database
import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// The submissions refused to a user, kept apart from the purchases (`rejections`) for support's "I paid and got nothing":
/// in the user's history with their reason, kept once however often their message is redelivered, blocking no purchase,
/// and pruned past their retention.
@Suite struct UserHistoryRejectionStoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)
    static func at(_ seconds: Double) -> Date { t0.addingTimeInterval(seconds) }

    func rejection(_ cause: String, user: UserID = "user-r", transaction: TransactionID? = nil, product: ProductID? = nil, reason: String,
                   at seconds: Double) -> RejectionRecord {
        RejectionRecord(causeID: cause, userId: user, store: .appstore, transactionId: transaction, productId: product, reason: reason,
                        rejectedAt: Self.at(seconds))
    }

    func keptRows(_ store: SQLPurchaseStore) async throws -> [String] {
        try await store.executor.run { connection in
            try connection.query("SELECT user_id, cause_id, reason FROM rejections ORDER BY user_id, cause_id").map {
                "\($0[0].string ?? "") \($0[1].string ?? "") \($0[2].string ?? "")"
            }
        }
    }

    @Test(arguments: StoreEngine.available) func rejectionsAreInTheHistoryWithTheirReasonKeptOnceAndBlockNoPurchase(_ engine: StoreEngine) async throws {
        let store = try await engine.freshStore()
        let paid = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "r-1"), userId: "user-r", productId: "coins.100",
                                  productType: .consumable, quantity: 1, purchaseTime: Self.at(0))
        _ = try await store.recordVerified(paid, at: Self.at(1))
        _ = try await store.grant(paid.key, items: [.currency("coins", 100)], at: Self.at(2))
        // A batch, as the verifier's: a forgery claiming the paid purchase's id and one claiming a later purchase's, a
        // signature refused (no ids), and the same message twice in it; then the batch's messages redelivered alone.
        let forged = rejection("s-1:r-1", transaction: "r-1", product: "coins.100", reason: "wrongBundle", at: 3)
        let later = rejection("s-2:r-2", transaction: "r-2", product: "coins.1000", reason: "wrongBundle", at: 3)
        let unsigned = rejection("s-3", reason: "invalidSignature", at: 4)
        let writtenBeforeTheFlush = try await store.batch {
            try await store.recordRejections([forged, later])
            try await store.recordRejections([unsigned, unsigned])
            // On the batch's connection, without flushing its deferred writes.
            return try await store.executor.run(usingReadAhead: true) { try $0.query("SELECT count(*) FROM rejections").first?[0].int64 }
        }
        #expect(writtenBeforeTheFlush == 0, "deferred to the batch's flush, where its rejections make one insert")
        var redelivered = unsigned
        redelivered.reason = "somethingElse"
        redelivered.rejectedAt = Self.at(9)
        try await store.recordRejections([forged, redelivered])
        // Another user's rejection of the same cause (a purchase restored to them, rejected again) is theirs.
        try await store.recordRejections([rejection("s-3", user: "user-other", reason: "unknownProduct", at: 5)])
        #expect(try await keptRows(store) == ["user-other s-3 unknownProduct", "user-r s-1:r-1 wrongBundle", "user-r s-2:r-2 wrongBundle",
                                              "user-r s-3 invalidSignature"], "each kept once, the first standing")

        // The claimed ids block nothing: the paid purchase is as it was, and the later one is recorded when it comes.
        #expect(try await store.purchase(paid.key)?.state == .granted)
        let real = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "r-2"), userId: "user-r", productId: "coins.1000",
                                  productType: .consumable, quantity: 1, purchaseTime: Self.at(5))
        #expect(try await store.recordVerified(real, at: Self.at(6)) == .recorded)

        let history = try await store.history(of: "user-r", limit: 500)
        let steps = history.events.map { "\($0.kind.rawValue) \($0.transactionId?.rawValue ?? "-") \($0.reason ?? "-")" }
        #expect(steps == [
            "verified r-2 -", "purchased r-2 -", "rejected - invalidSignature", "rejected r-2 wrongBundle", "rejected r-1 wrongBundle",
            "itemGranted r-1 -", "granted r-1 -", "verified r-1 -", "purchased r-1 -",
        ])
        let refused = try #require(history.events.first { $0.kind == .rejected && $0.transactionId == "r-2" })
        #expect(refused == UserHistory.Event(at: Self.at(3), kind: .rejected, store: .appstore, transactionId: "r-2", productId: "coins.1000",
                                             reason: "wrongBundle"))
        #expect(try await store.history(of: "user-other").events.map(\.reason) == ["unknownProduct"])

        // Two rejections at the same millisecond claiming the same id have keys of their own: pages of one repeat neither.
        var pages: [UserHistory.Event] = []
        var before: SQLPurchaseStore.HistoryCursor?
        repeat {
            let page = try await store.history(of: "user-r", before: before, limit: 1)
            pages += page.events
            before = try page.next.map { try #require(SQLPurchaseStore.HistoryCursor($0)) }
        } while before != nil && pages.count < 20
        #expect(pages == history.events)
    }

    @Test(arguments: StoreEngine.available) func rejectionsPastTheirRetentionArePrunedOldestFirstInChunks(_ engine: StoreEngine) async throws {
        let store = try await engine.freshStore()
        try await store.recordRejections((0..<5).map { rejection("s-\($0)", reason: "invalidSignature", at: Double($0)) })
        #expect(try await store.pruneRejections(before: Self.at(3), limit: 2) == 2)
        #expect(try await keptRows(store) == ["user-r s-2 invalidSignature", "user-r s-3 invalidSignature", "user-r s-4 invalidSignature"],
                "the oldest first")
        #expect(try await store.pruneRejections(before: Self.at(3), limit: 2) == 1)
        #expect(try await store.pruneRejections(before: Self.at(3), limit: 2) == 0)
        #expect(try await store.history(of: "user-r").events.map(\.at) == [Self.at(4), Self.at(3)])
    }
}

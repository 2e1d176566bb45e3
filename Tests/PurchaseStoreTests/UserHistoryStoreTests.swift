import Database
import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// A user's history as support reads it: each step of their purchases with its reason, the ledger's entries, the consent,
/// newest first, a page at a time.
@Suite struct UserHistoryStoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)
    static func at(_ seconds: Double) -> Date { t0.addingTimeInterval(seconds) }

    func purchase(_ id: TransactionID, user: UserID = "user-h", at seconds: Double) -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: "coins.100", productType: .consumable, quantity: 1,
                       purchaseTime: Self.at(seconds))
    }

    /// "I paid and got nothing", "my coins vanished": a purchase granted and finished, one rejected, one refunded after
    /// its coins were mostly spent, and the user's consent.
    func storeWithAStory(_ engine: StoreEngine) async throws -> SQLPurchaseStore {
        let store = try await engine.freshStore()
        let (granted, rejected, refunded) = (purchase("h-1", at: 0), purchase("h-2", at: 3.5), purchase("h-3", at: 4.5))
        _ = try await store.recordVerified(granted, at: Self.at(1))
        _ = try await store.grant(granted.key, items: [.currency("coins", 100)], at: Self.at(2))
        _ = try await store.finish(granted.key, at: Self.at(3))
        _ = try await store.recordRejected(rejected, reason: "wrongEnvironment", at: Self.at(4))
        _ = try await store.recordVerified(refunded, at: Self.at(5))
        _ = try await store.grant(refunded.key, items: [.currency("coins", 100)], at: Self.at(6))
        // The user spent 170 of their 200 coins before the refund.
        _ = try await store.executor.run { connection in try connection.query("UPDATE balances SET amount = 30 WHERE user_id = 'user-h'") }
        _ = try await store.revoke(refunded.key, at: Self.at(7))
        _ = try await store.recordConsent(userId: "user-h", consumptionData: true, decidedAt: Self.at(8), now: Self.at(8))
        // Another user's purchase is not in this user's history.
        _ = try await store.recordVerified(purchase("o-1", user: "user-other", at: 2.5), at: Self.at(2.5))
        return store
    }

    @Test(arguments: StoreEngine.available) func theHistorySaysWhatHappenedNewestFirstWithReasons(_ engine: StoreEngine) async throws {
        let store = try await storeWithAStory(engine)
        let history = try await store.history(of: "user-h", limit: 500)
        #expect(history.next == nil && history.userId == "user-h")
        let steps = history.events.map { "\($0.kind.rawValue) \($0.transactionId?.rawValue ?? "-")" }
        #expect(steps == [
            "consentDecided -", "itemRevoked h-3", "revoked h-3", "itemGranted h-3", "granted h-3", "verified h-3", "purchased h-3",
            "rejected h-2", "purchased h-2", "finished h-1", "itemGranted h-1", "granted h-1", "verified h-1", "purchased h-1",
        ])
        #expect(history.events.first?.consent == true)
        let revoked = try #require(history.events.first { $0.kind == .itemRevoked })
        #expect(revoked.item == UserHistory.Item(kind: .currency, code: "coins", amount: -100, shortfall: 70), "what the refund could not take back")
        #expect(revoked.at == Self.at(7) && revoked.productId == "coins.100")
        #expect(history.events.first { $0.kind == .rejected }?.reason == "wrongEnvironment")
        #expect(history.events.first { $0.kind == .itemGranted }?.item == UserHistory.Item(kind: .currency, code: "coins", amount: 100))
        #expect(try await store.history(of: "user-nobody").events.isEmpty)
    }

    @Test(arguments: StoreEngine.available) func pagesFollowOneAnotherWithoutGapOrRepeat(_ engine: StoreEngine) async throws {
        let store = try await storeWithAStory(engine)
        let whole = try await store.history(of: "user-h", limit: 500).events
        var pages: [[UserHistory.Event]] = []
        var before: SQLPurchaseStore.HistoryCursor?
        repeat {
            let page = try await store.history(of: "user-h", before: before, limit: 4)
            pages.append(page.events)
            before = try page.next.map { try #require(SQLPurchaseStore.HistoryCursor($0), "the cursor reads back: \($0)") }
        } while before != nil && pages.count < 10
        #expect(pages.map(\.count) == [4, 4, 4, 2])
        #expect(pages.flatMap { $0 } == whole)
        for text in ["", "1.2", "x.1.00", "1.99.00", "1.1.0g", "1.1.abc"] { #expect(SQLPurchaseStore.HistoryCursor(text) == nil, "\(text)") }
    }
}

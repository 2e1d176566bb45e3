import Database
import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// The purchase writes a batch defers and makes set-based, on both engines: the rows are those that call-by-call
/// writes leave, later decisions in the batch see them, and one that fails undoes the batch.
@Suite struct BatchWriteStoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)

    /// 300 purchases (more than one SQLite group) with every optional column set or not and ids that need quoting.
    static let purchases: [PurchaseRecord] = (0..<300).map { index in
        let types: [ProductType] = [.consumable, .nonConsumable, .autoRenewable, .unknown]
        return PurchaseRecord(key: PurchaseKey(store: index % 5 == 0 ? .appcoins : .appstore, transactionId: index % 7 == 0 ? "t\"\\,{\(index)}" : "t\(index)"),
                              userId: "user-\(index % 11)", productId: "coins.\(index % 4)", productType: types[index % 4], quantity: 1 + index % 3,
                              purchaseTime: t0.addingTimeInterval(Double(-index)), environment: index % 3 == 0 ? nil : "Sandbox",
                              originalTransactionId: index % 2 == 0 ? nil : "o\(index)", packageName: index % 4 == 0 ? nil : "com.example.game",
                              purchaseToken: index % 4 == 0 ? nil : "token-\(index)", storeConsumed: index % 5 == 0,
                              expiresDate: types[index % 4] == .autoRenewable ? t0.addingTimeInterval(Double(30 * 86_400 - index)) : nil,
                              app: index % 6 == 1 ? "puzzle" : nil)
    }

    /// A refund first, the records, grants, finishes and repeats of them, each stamped with a time of its own.
    static func play(_ store: SQLPurchaseStore) async throws -> [String] {
        var outcomes: [String] = []
        outcomes.append("\(try await store.revoke(purchases[4].key, at: t0))")
        for (index, purchase) in purchases.enumerated() {
            outcomes.append("\(try await store.recordVerified(purchase, at: t0.addingTimeInterval(Double(index))))")
        }
        outcomes.append("\(try await store.recordVerified(purchases[1], at: t0))")
        for (index, purchase) in purchases.enumerated() where index % 3 == 0 {
            outcomes.append("\(try await store.grant(purchase.key, items: [.currency("coins", Int64(10 * purchase.quantity))], at: t0.addingTimeInterval(Double(1000 + index))))")
        }
        for (index, purchase) in purchases.enumerated() where index % 6 == 0 {
            outcomes.append("\(try await store.finish(purchase.key, at: t0.addingTimeInterval(Double(2000 + index))))")
        }
        outcomes.append("\(try await store.finish(purchases[0].key, at: t0))")
        outcomes.append("\(try await store.grant(purchases[1].key, items: [.currency("coins", 10)], at: t0))")
        return outcomes
    }

    static func rows(_ store: SQLPurchaseStore) async throws -> [[SQLValue]] {
        try await store.executor.run { connection in
            try connection.query("SELECT * FROM purchases ORDER BY store, transaction_id").map { Array($0) }
        }
    }

    @Test(arguments: StoreEngine.available) func aBatchWritesTheRowsThatCallByCallWritesWrite(_ engine: StoreEngine) async throws {
        let (alone, batched) = (try await engine.freshStore(), try await engine.freshStore())
        let expected = try await Self.play(alone)
        let outcomes = try await batched.batch {
            try await batched.readAhead(Self.purchases.map(\.key))
            return try await Self.play(batched)
        }
        #expect(outcomes == expected)
        let (expectedRows, rows) = (try await Self.rows(alone), try await Self.rows(batched))
        #expect(rows.count == 300 && expectedRows.count == 300)
        let mismatch = zip(rows, expectedRows).first { $0 != $1 }
        #expect(mismatch == nil, "the first row that differs (batched, call by call): \(String(describing: mismatch))")
        #expect(try await batched.balances(of: "user-0") == alone.balances(of: "user-0"))
        let subscription = Self.purchases[2]
        for store in [alone, batched] { #expect(try await store.purchase(subscription.key) == subscription, "every column read back, the expiry too") }
    }

    /// A record the database refuses (a quantity of 0 breaks a CHECK) fails the batch at its COMMIT when its write was
    /// deferred: nothing of the batch stays, not the grant before it either.
    @Test(arguments: StoreEngine.available) func aDeferredWriteThatFailsUndoesItsBatch(_ engine: StoreEngine) async throws {
        let store = try await engine.freshStore()
        let (good, bad) = (Self.purchases[1], PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "zero"), userId: "user-1",
                                                                  productId: "coins.1", quantity: 0, purchaseTime: Self.t0))
        await #expect(throws: DatabaseError.self) { try await store.recordVerified(bad, at: Self.t0) }
        await #expect(throws: DatabaseError.self) {
            try await store.batch {
                #expect(try await store.recordVerified(good, at: Self.t0) == .recorded)
                _ = try await store.grant(good.key, items: [.currency("coins", 10)], at: Self.t0)
                #expect(try await store.recordVerified(bad, at: Self.t0) == .recorded, "deferred: decided, not written yet")
            }
        }
        #expect(try await store.states(of: [good.key, bad.key]) == [:])
        #expect(try await store.balances(of: good.userId) == [:])
        #expect(try await store.recordVerified(good, at: Self.t0) == .recorded, "the store works on after the rollback")
    }
}

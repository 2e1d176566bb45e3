import Database
import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// Migration 23: a store of the schema before apps were named keeps its purchases (they belong to the primary app, `app`
/// nil), and records the app of every purchase after.
@Suite struct AppMigrationTests {
    @Test(arguments: StoreEngine.available) func purchasesFromBeforeBelongToThePrimaryApp(_ engine: StoreEngine) async throws {
        let store = try SQLPurchaseStore(url: try await engine.freshURL())
        #expect(try await store.migrate(through: 22) == Array(1...22))
        let now = Date()
        let before = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "t-before"), userId: "u", productId: "coins.100",
                                    productType: .consumable, quantity: 1, purchaseTime: now)
        // Written as version 22's code wrote it, with the columns it had.
        _ = try await store.executor.run { connection in
            try connection.query("""
                INSERT INTO purchases (store, transaction_id, user_id, product_id, product_type, quantity, purchase_time, state, verified_at)
                VALUES ('appstore', 't-before', 'u', 'coins.100', 'consumable', 1, $1, 'verified', $1)
                """, [.integer(PurchaseTime.milliseconds(now))])
        }
        #expect(try await store.migrate() == Array(23...latestSchemaVersion))
        #expect(try await store.purchase(before.key)?.app == nil)
        #expect(try await store.purchase(before.key)?.productId == "coins.100", "the rest of the row as it was")

        // BatchWriteStoreTests holds a batch's deferred writes of `app` to these.
        var after = before
        after.key = PurchaseKey(store: .googleplay, transactionId: "GPA.1")
        after.app = "puzzle"
        #expect(try await store.recordVerified(after, at: now) == .recorded)
        #expect(try await store.purchase(after.key)?.app == "puzzle")
    }
}

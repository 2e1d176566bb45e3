import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// Migration 16: AppCoins purchases recorded (by version 15) with a `developerPayload` that is not a UUID as their
/// account token bind nothing any more; a UUID stays, and so do App Store tokens.
@Suite struct AccountTokenMigrationTests {
    @Test(arguments: StoreEngine.available) func onlyUUIDsStayAppCoinsAccountTokens(_ engine: StoreEngine) async throws {
        let store = try SQLPurchaseStore(url: try await engine.freshURL())
        #expect(try await store.migrate(through: 15) == Array(1...15))
        let uuid = "5D3A0F0E-8A7C-4C1E-9D57-00000000A11C"
        let tokens: [(Store, TransactionID, AccountToken)] = [(.appcoins, "a-json", #"{"developerPayload":"x","isFreeTrial":false}"#), (.appcoins, "a-order", "order-2291"),
                                                 (.appcoins, "a-36", AccountToken(String(repeating: "x", count: 36))), (.appcoins, "a-uuid", AccountToken(uuid)),
                                                 (.appstore, "s-token", "kept-as-apple-signed-it")]
        let now = Date()
        for (storeName, id, token) in tokens {
            let record = PurchaseRecord(key: PurchaseKey(store: storeName, transactionId: id), userId: "u", productId: "coins.100", productType: .consumable,
                                        quantity: 1, purchaseTime: now, appAccountToken: token)
            #expect(try await store.recordVerified(record, at: now) == .recorded)
        }
        #expect(try await store.migrate() == Array(16...latestSchemaVersion))
        var left: [TransactionID: AccountToken] = [:]
        for (storeName, id, _) in tokens {
            left[id] = try await store.purchase(PurchaseKey(store: storeName, transactionId: id))?.appAccountToken
        }
        #expect(left == ["a-uuid": AccountToken(uuid), "s-token": "kept-as-apple-signed-it"])
    }
}

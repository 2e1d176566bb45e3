import Database
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
        let now = PurchaseTime.milliseconds(Date())
        // Written as version 15's code wrote them, with the columns it had.
        for (storeName, id, token) in tokens {
            _ = try await store.executor.run { connection in
                try connection.query("""
                    INSERT INTO purchases (store, transaction_id, user_id, product_id, product_type, quantity, purchase_time, state, verified_at,
                                           app_account_token)
                    VALUES ($1, $2, 'u', 'coins.100', 'consumable', 1, $3, 'verified', $3, $4)
                    """, [.text(storeName.rawValue), .text(id.rawValue), .integer(now), .text(token.rawValue)])
            }
        }
        #expect(try await store.migrate() == Array(16...latestSchemaVersion))
        var left: [TransactionID: AccountToken] = [:]
        for (storeName, id, _) in tokens {
            left[id] = try await store.purchase(PurchaseKey(store: storeName, transactionId: id))?.appAccountToken
        }
        #expect(left == ["a-uuid": AccountToken(uuid), "s-token": "kept-as-apple-signed-it"])
    }
}

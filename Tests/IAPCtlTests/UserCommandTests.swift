import Foundation
import JSON
import PurchaseDomain
import PurchaseStore
import Testing
import TestSupport

/// `iapctl user`: what a user owns, read back as apps would get it.
@Suite struct UserCommandTests {
    @Test func printsBalancesEntitlementsInForceAndPendingPurchases() async throws {
        let url = "sqlite:" + FileManager.default.temporaryDirectory.appendingPathComponent("user-\(UUID().uuidString).sqlite").path
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        let now = Date()
        let grants: [(id: String, product: String, type: ProductType, item: GrantItem, finish: Bool)] = [
            ("u-1", "coins.100", .consumable, .currency("coins", 100), true),
            ("u-2", "coins.100", .consumable, .currency("coins", 100), false),
            ("u-3", "adfree", .nonConsumable, .entitlement("adfree"), true),
            ("u-4", "pass.monthly", .autoRenewable, .entitlement("pass", until: now.addingTimeInterval(-60)), true),
        ]
        for grant in grants {
            let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: grant.id), userId: "user-7", productId: grant.product,
                                        productType: grant.type, quantity: 1, purchaseTime: now)
            _ = try await store.recordVerified(record, at: now)
            _ = try await store.grant(record.key, items: [grant.item], at: now)
            if grant.finish { _ = try await store.finish(record.key, at: now) }
        }
        let result = try await VerifyCommandTests.run(["user", "user-7", "--store", url], input: "")
        #expect(result.status == 0)
        let json = try #require(result.lines.last.flatMap { JSONValue.parse(Array($0.utf8)) }?.objectValue, "\(result.lines)")
        #expect(json["userId"]?.stringValue == "user-7")
        #expect(json["balances"]?.objectValue?["coins"]?.int64Value == 200)
        let entitlements = json["entitlements"]?.arrayValue ?? []
        #expect(entitlements.count == 1, "the expired pass is not in force: \(entitlements)")
        #expect(entitlements.first?.objectValue?["entitlement"]?.stringValue == "adfree")
        #expect(entitlements.first?.objectValue?["productId"]?.stringValue == "adfree")
        #expect(entitlements.first?.objectValue?["expiresAt"] == .null, "for good: null, not missing")
        #expect(json["pending"]?.arrayValue?.compactMap { $0.objectValue?["transactionId"]?.stringValue } == ["u-2"])
        #expect(try await VerifyCommandTests.run(["user", "--store", url], input: "").status == 2, "a user id is required")
    }
}

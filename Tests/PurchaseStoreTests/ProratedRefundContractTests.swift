import Foundation
import PurchaseDomain
import Testing

/// A prorated refund on every repository: its share of the coins taken back (less what was spent), the entitlement
/// whole; its reversal gives back exactly what it took; the books balance throughout.
@Suite struct ProratedRefundContractTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_700_000)

    @Test(arguments: RepositoryKind.available) func aProratedRefundTakesBackItsShare(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let key = PurchaseKey(store: .appstore, transactionId: "p1")
        _ = try await store.recordVerified(PurchaseRecord(key: key, userId: "u", productId: "coins.1000", productType: .consumable, quantity: 1,
                                                          purchaseTime: Self.t0), at: Self.t0)
        _ = try await store.grant(key, items: [.currency("coins", 1000)], at: Self.t0)
        #expect(try await store.revoke(key, decidedAt: Self.t0, share: 67_932, at: Self.t0) == .revoked(shortfall: [:]))
        #expect(try await store.balances(of: "u") == ["coins": 321], "67.932 % of 1000, rounded down, taken back")
        #expect(try await store.bookMismatches().isEmpty)
        guard case .reinstated = try await store.reinstate(key, items: [.currency("coins", 1000)], decidedAt: Self.t0.addingTimeInterval(1),
                                                           at: Self.t0) else {
            Issue.record("the reversal was not carried out")
            return
        }
        #expect(try await store.balances(of: "u") == ["coins": 1000], "what the refund took, given back")
        #expect(try await store.bookMismatches().isEmpty)

        let spent = PurchaseKey(store: .appstore, transactionId: "p2")
        _ = try await store.recordVerified(PurchaseRecord(key: spent, userId: "v", productId: "coins.1000", productType: .consumable, quantity: 1,
                                                          purchaseTime: Self.t0), at: Self.t0)
        _ = try await store.grant(spent, items: [.currency("coins", 1000)], at: Self.t0)
        try await store.setBalance(of: "v", "coins", to: 100)
        #expect(try await store.revoke(spent, share: 50_000, at: Self.t0) == .revoked(shortfall: ["coins": 400]), "half is 500; 100 were left")
        #expect(try await store.balances(of: "v") == ["coins": 0])
    }

    /// A quantity-based partial refund (Google Play's `voidedQuantity`) of 1 of 3 units takes back exactly one unit's worth.
    @Test(arguments: RepositoryKind.available) func aQuantityRefundTakesBackTheRefundedUnitsWorth(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let key = PurchaseKey(store: .googleplay, transactionId: "GPA.q-1")
        _ = try await store.recordVerified(PurchaseRecord(key: key, userId: "u", productId: "coins.100", productType: .consumable, quantity: 3,
                                                          purchaseTime: Self.t0), at: Self.t0)
        _ = try await store.grant(key, items: [.currency("coins", 300)], at: Self.t0)
        #expect(try await store.revoke(key, decidedAt: Self.t0, share: .units(1), at: Self.t0) == .revoked(shortfall: [:]))
        #expect(try await store.balances(of: "u") == ["coins": 200], "one of three units' worth taken back")
        #expect(try await store.bookMismatches().isEmpty)
    }
}

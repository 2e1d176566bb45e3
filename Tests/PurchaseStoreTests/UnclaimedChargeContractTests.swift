import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// Charges the store announced with no user known, on every repository: kept unclaimed and owned by nobody, claimed once
/// by a submission, flagged at their deadline if unconsumed consumables, ended by their refund.
@Suite struct UnclaimedChargeContractTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_700_000)

    func charge(_ id: TransactionID, type: ProductType = .consumable, token: AccountToken? = nil, user: UserID = .nobody) -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: type == .consumable ? "coins.100" : "adfree",
                       productType: type, quantity: 1, purchaseTime: Self.t0, appAccountToken: token)
    }

    @Test(arguments: RepositoryKind.available) func aChargeIsKeptUnclaimedThenClaimedOnce(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        #expect(try await store.recordUnclaimed(charge("c1", user: "ignored"), at: Self.t0) == .recorded)
        let kept = try #require(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "c1")))
        #expect(kept.state == .unclaimed && kept.userId == .nobody, "owned by nobody whatever the record said")
        #expect(try await store.recordUnclaimed(charge("c1"), at: Self.t0) == .existing(state: .unclaimed, userId: .nobody))
        #expect(try await store.owner(store: .appstore, originalTransactionId: "c1") == nil)
        guard case .notGrantable = try await store.grant(kept.key, items: [.currency("coins", 100)], at: Self.t0) else {
            Issue.record("an unclaimed charge was granted")
            return
        }
        #expect(try await store.recordVerified(charge("c1", token: "t-1", user: "u-1"), at: Self.t0) == .recorded, "claimed")
        let claimed = try #require(try await store.purchase(kept.key))
        #expect(claimed.state == .verified && claimed.userId == "u-1" && claimed.appAccountToken == "t-1")
        #expect(try await store.recordVerified(charge("c1", user: "u-2"), at: Self.t0) == .existing(state: .verified, userId: "u-1"), "once")
        #expect(try await store.owner(ofAccountToken: "T-1") == "u-1", "tokens compare with ASCII letters folded")
        #expect(try await store.owner(ofAccountToken: "t-2") == nil)

        // Nobody's charges, flagged or refunded, name no owner of their token or subscription.
        _ = try await store.recordUnclaimed(charge("c7", token: "t-7"), at: Self.t0)
        _ = try await store.revoke(PurchaseKey(store: .appstore, transactionId: "c7"), at: Self.t0)
        #expect(try await store.owner(ofAccountToken: "t-7") == nil)
        #expect(try await store.owner(store: .appstore, originalTransactionId: "c7") == nil)
    }

    /// A purchase another user restored under `transfer` no longer says whose its token is.
    @Test(arguments: RepositoryKind.available) func aTransferredPurchaseNoLongerNamesItsTokensUser(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let adfree = charge("e1", type: .nonConsumable, token: "t-a", user: "user-a")
        #expect(try await store.recordVerified(adfree, at: Self.t0) == .recorded)
        _ = try await store.grant(adfree.key, items: [.entitlement("adfree")], at: Self.t0)
        #expect(try await store.owner(ofAccountToken: "t-a") == "user-a")
        guard case .transferred = try await store.transfer(adfree.key, to: "user-b", policy: .transfer, at: Self.t0) else {
            Issue.record("not transferred")
            return
        }
        #expect(try await store.owner(ofAccountToken: "t-a") == nil, "the token is user-a's, the purchase user-b's now")
    }

    @Test(arguments: RepositoryKind.available) func anUnclaimedConsumableIsFlaggedAtItsDeadlineOnce(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        _ = try await store.recordUnclaimed(charge("c2"), at: Self.t0)
        _ = try await store.recordUnclaimed(charge("c3", type: .nonConsumable), at: Self.t0)
        _ = try await store.recordUnclaimed(charge("c4"), at: Self.t0)
        _ = try await store.revoke(PurchaseKey(store: .appstore, transactionId: "c4"), at: Self.t0)
        #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "c4"))?.state == .revoked, "its refund ends it")
        let later = Self.t0.addingTimeInterval(86_401)
        #expect(try await store.sweepDue(store: .appstore, deadline: 86_400, now: Self.t0.addingTimeInterval(3600)).isEmpty, "not due yet")
        let due = try await store.sweepDue(store: .appstore, deadline: 86_400, now: later)
        #expect(due.map(\.record.key.transactionId) == ["c2"] && due.first?.previousState == .unclaimed, "the consumable only")
        #expect(try await store.sweepDue(store: .appstore, deadline: 86_400, now: later).isEmpty, "once")
        let notices = try await store.unsentRefundNotices(store: .appstore, deadline: 86_400)
        #expect(notices.map(\.record.userId) == [.nobody])
    }

    @Test(arguments: StoreEngine.available) func theGaugeCountsUnclaimedChargesAndTheOldest(_ engine: StoreEngine) async throws {
        let store = try await engine.freshStore()
        #expect(try await store.openStatistics().unclaimedCharges == 0)
        _ = try await store.recordUnclaimed(charge("c5"), at: Self.t0)
        var later = charge("c6")
        later.purchaseTime = Self.t0.addingTimeInterval(60)
        _ = try await store.recordUnclaimed(later, at: Self.t0)
        let open = try await store.openStatistics()
        #expect(open.unclaimedCharges == 2 && open.oldestUnclaimedCharge == Self.t0)
        #expect(open.openPurchasesByState.isEmpty, "not open: nothing is owed to a user yet")
    }

    /// A token the app's backend registered (`user.token`) names its user, before any purchase does and against a signed
    /// transaction another user submitted with it: the first registration stands (whatever the case of its letters); a
    /// token a purchase of another user is bound to, and nobody registered, is that user's; the owner's own registration of
    /// a token their purchase is bound to is kept.
    @Test(arguments: RepositoryKind.available) func aRegisteredTokenNamesItsUserAndTheFirstRegistrationStands(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let token: AccountToken = "5e0c2a31-7d4f-4b8e-9a61-0000000000aa"
        #expect(try await store.owner(ofAccountToken: token) == nil)
        #expect(try await store.registerAccountToken(token, for: "u-1", at: Self.t0) == "u-1")
        #expect(try await store.owner(ofAccountToken: AccountToken(token.rawValue.uppercased())) == "u-1", "one account, whatever its letters' case")
        #expect(try await store.registerAccountToken(AccountToken(token.rawValue.uppercased()), for: "u-2", at: Self.t0) == "u-1", "another user's: refused")
        #expect(try await store.registerAccountToken(token, for: "u-1", at: Self.t0) == "u-1", "the same again")
        #expect(try await store.owner(ofAccountToken: token) == "u-1")
        #expect(try await store.recordVerified(charge("leaked", token: token, user: "u-5"), at: Self.t0.addingTimeInterval(60)) == .recorded)
        #expect(try await store.owner(ofAccountToken: token) == "u-1", "a registration stands against another user's submission")

        let own: AccountToken = "5e0c2a31-7d4f-4b8e-9a61-0000000000cc"
        #expect(try await store.recordVerified(charge("p2", token: own, user: "u-6"), at: Self.t0) == .recorded)
        #expect(try await store.registerAccountToken(own, for: "u-6", at: Self.t0) == "u-6")
        _ = try await store.recordVerified(charge("p3", token: own, user: "u-7"), at: Self.t0.addingTimeInterval(60))
        #expect(try await store.owner(ofAccountToken: own) == "u-6", "kept: registered, not only bound")

        let bound: AccountToken = "5e0c2a31-7d4f-4b8e-9a61-0000000000bb"
        #expect(try await store.recordVerified(charge("p1", token: bound, user: "u-3"), at: Self.t0) == .recorded)
        #expect(try await store.registerAccountToken(bound, for: "u-4", at: Self.t0) == "u-3", "a purchase of another user is bound to it")
        #expect(try await store.owner(ofAccountToken: bound) == "u-3")
    }
}

import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// A refund's reversal of a purchase that was never granted, on every repository: it goes back to where its refund found
/// it (verified, or unclaimed for a charge nobody claimed), nothing is given or finished, and the books stay balanced.
@Suite struct RefundReversalContractTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_900_000)
    static func day(_ n: Double) -> Date { t0.addingTimeInterval(n * 86_400) }

    func purchase(_ id: TransactionID, user: UserID, product: ProductID = "coins.100") -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: product, productType: .consumable, quantity: 1,
                       purchaseTime: Self.t0)
    }

    /// Refused its grant (nothing to give: its product unknown), flagged at its deadline, clawed back, then the store
    /// reverses the refund: verified again, never finished. Refunded before its grant with the catalog's items to give, the
    /// reversal is its grant, as before.
    @Test(arguments: RepositoryKind.available) func aPurchaseNeverGrantedIsNotFinishedByItsRefundsReversal(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let unknown = purchase("r-1", user: "user-r", product: "no.such.product")
        #expect(try await store.recordVerified(unknown, at: Self.t0) == .recorded)
        #expect(try await store.sweepDue(store: .appstore, deadline: 86_400, now: Self.day(2)).map(\.record.key) == [unknown.key])
        #expect(try await store.revoke(unknown.key, reason: "refundDue", onlyIfDue: true, at: Self.day(2)) == .revoked(shortfall: [:]))

        #expect(try await store.reinstate(unknown.key, items: [], decidedAt: Self.day(3), at: Self.day(3)) == .returned(to: .verified))
        #expect(try await store.purchase(unknown.key)?.state == .verified)
        #expect(try await store.reinstate(unknown.key, items: [], decidedAt: Self.day(3), at: Self.day(4)) == .notRevoked(state: .verified), "once")
        #expect(try await store.bookMismatches() == [])
        // Where it was: refunded again by a later decision, like any verified purchase.
        #expect(try await store.revoke(unknown.key, decidedAt: Self.day(5), at: Self.day(5)) == .revoked(shortfall: [:]))

        let known = purchase("r-2", user: "user-r")
        _ = try await store.recordVerified(known, at: Self.t0)
        #expect(try await store.revoke(known.key, at: Self.day(1)) == .revoked(shortfall: [:]))
        guard case .reinstated(let items, _, _, _) = try await store.reinstate(known.key, items: [.currency("coins", 100)], at: Self.day(2)) else {
            Issue.record("refunded before its grant, with items to give: not granted by its reversal"); return
        }
        #expect(items == [.currency("coins", 100)])
        #expect(try await store.purchase(known.key)?.state == .finished)
        #expect(try await store.balances(of: "user-r") == ["coins": 100])
        #expect(try await store.bookMismatches() == [])
    }

    /// A charge nobody claimed, refunded, then the refund reversed: unclaimed again, owned by nobody, nothing given to the
    /// empty user id; claimed by its submission, it is granted to its user.
    @Test(arguments: RepositoryKind.available) func anUnclaimedChargeIsUnclaimedAgainAfterItsRefundsReversal(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let charge = purchase("r-3", user: .nobody)
        #expect(try await store.recordUnclaimed(charge, at: Self.t0) == .recorded)
        #expect(try await store.revoke(charge.key, decidedAt: Self.day(1), at: Self.day(1)) == .revoked(shortfall: [:]))

        #expect(try await store.reinstate(charge.key, items: [.currency("coins", 100)], decidedAt: Self.day(2), at: Self.day(2)) == .returned(to: .unclaimed))
        let kept = try #require(try await store.purchase(charge.key))
        #expect(kept.state == .unclaimed && kept.userId == .nobody)
        #expect(try await store.balances(of: .nobody).isEmpty, "nothing is given to nobody")
        #expect(try await store.grantedItems(charge.key).isEmpty)
        #expect(try await store.bookMismatches().isEmpty)

        #expect(try await store.recordVerified(purchase("r-3", user: "user-s"), at: Self.day(3)) == .recorded, "claimed")
        guard case .granted = try await store.grant(charge.key, items: [.currency("coins", 100)], at: Self.day(3)) else {
            Issue.record("the claimed charge was not granted"); return
        }
        #expect(try await store.balances(of: "user-s") == ["coins": 100])
        #expect(try await store.bookMismatches().isEmpty)
    }
}

import Foundation
import InMemoryPurchaseStore
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import Testing
import WorkerRuntime

/// The granter's answer to a refund's reversal (REFUND_REVERSED) of a purchase that was never granted, on the in-memory
/// repository: never finished (rule 1), never granted to nobody, and never announced in an `item.granted` its schema
/// refuses.
@Suite struct RefundReversalStageTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_800_000)
    static func day(_ n: Double) -> Date { t0.addingTimeInterval(n * 86_400) }
    static let codec = StageFixtures.codec
    let store = InMemoryPurchaseStore()

    /// What the granter (claw-back on) answers `event` with at `now`.
    @discardableResult
    func handle(_ event: some PipelineEvent, at now: Date) async throws -> StageResult {
        try await GranterStageTests.granter(store, at: now, clawBack: true).handle(try StageFixtures.message(event, at: now))
    }

    func reversal(_ id: TransactionID, on day: Double) -> PurchaseRevokedEvent {
        PurchaseRevokedEvent(store: .appstore, transactionId: id, reason: .REFUND_REVERSED, decidedAt: Self.day(day), revokedAt: Self.day(day))
    }

    func key(_ id: TransactionID) -> PurchaseKey { PurchaseKey(store: .appstore, transactionId: id) }

    /// Published nothing.
    func isSilent(_ result: StageResult) -> Bool {
        if case .publish(let out) = result { return out.isEmpty }
        return false
    }

    /// A product the catalog does not know is refused its grant; at its deadline its refund falls due and is clawed back;
    /// the store then reverses that refund. Nothing is given, nothing announced, and the purchase is verified again as its
    /// refusal left it: not finished (the audit finds nothing finished without a grant).
    @Test func aReversedRefundOfAnUnknownProductsPurchaseLeavesItUngranted() async throws {
        let record = PurchaseRecord(key: key("u-1"), userId: "user-u", productId: "no.such.product", productType: .consumable, quantity: 1,
                                    purchaseTime: Self.t0)
        #expect(try await store.recordVerified(record, at: Self.t0) == .recorded)
        guard case .publish(let refused) = try await handle(PurchaseVerifiedEvent(store: .appstore, transactionId: "u-1", productId: "no.such.product", quantity: 1,
                                                                                  userId: "user-u", purchaseDate: Self.t0, source: .client, verifiedAt: Self.t0),
                                                            at: Self.t0) else { Issue.record("not answered"); return }
        #expect(refused.map(\.topic) == [Self.codec.topic(.purchaseRejected)])
        let flagged = try await store.sweepDue(store: .appstore, deadline: 86_400, now: Self.day(2))
        #expect(flagged.map(\.record.key) == [record.key])
        #expect(isSilent(try await handle(RefundDue(store: .appstore, transactionId: "u-1", userId: "user-u", productId: "no.such.product", state: nil,
                                                    purchaseDate: Self.t0, deadline: Self.day(1), flaggedAt: Self.day(2)), at: Self.day(2))))
        #expect(try await store.purchase(record.key)?.state == .revoked, "clawed back")

        #expect(isSilent(try await handle(reversal("u-1", on: 3), at: Self.day(3))), "nothing given: no item.granted for the finisher")
        #expect(try await store.purchase(record.key)?.state == .verified)
        #expect(try await store.bookMismatches() == [])
        let holdings = try await store.holdings(of: "user-u", at: Self.day(3))
        #expect(holdings.balances.isEmpty && holdings.entitlements.isEmpty)
        #expect(isSilent(try await handle(reversal("u-1", on: 3), at: Self.day(4))), "again: changes nothing")
        #expect(try await store.purchase(record.key)?.state == .verified)
    }

    /// A charge the store announced that nobody claimed (the empty user id), refunded, then its refund reversed: unclaimed
    /// again, given to nobody and announced to nobody, until a submission claims it and it is granted as usual.
    @Test func aReversedRefundOfAnUnclaimedChargeLeavesItUnclaimed() async throws {
        let charge = PurchaseRecord(key: key("c-1"), userId: .nobody, productId: "coins.100", productType: .consumable, quantity: 5000, purchaseTime: Self.t0)
        #expect(try await store.recordUnclaimed(charge, at: Self.t0) == .recorded)
        #expect(isSilent(try await handle(PurchaseRevokedEvent(store: .appstore, transactionId: "c-1", reason: .REFUND, decidedAt: Self.day(1),
                                                               revokedAt: Self.day(1)), at: Self.day(1))))
        #expect(try await store.purchase(charge.key)?.state == .revoked)

        #expect(isSilent(try await handle(reversal("c-1", on: 2), at: Self.day(2))), "no item.granted to the empty user id")
        let kept = try #require(try await store.purchase(charge.key))
        #expect(kept.state == .unclaimed && kept.userId == .nobody)
        let nobodys = try await store.holdings(of: .nobody, at: Self.day(2))
        #expect(nobodys.balances.isEmpty && nobodys.entitlements.isEmpty, "nothing is held by nobody")
        #expect(try await store.bookMismatches().isEmpty)

        // Claimed by its submission, it is granted to its user.
        #expect(try await store.recordVerified(PurchaseRecord(key: charge.key, userId: "user-c", productId: "coins.100", productType: .consumable, quantity: 1,
                                                              purchaseTime: Self.t0), at: Self.day(3)) == .recorded)
        let answer = try await handle(PurchaseVerifiedEvent(store: .appstore, transactionId: "c-1", productId: "coins.100", quantity: 1, userId: "user-c",
                                                             purchaseDate: Self.t0, source: .client, verifiedAt: Self.day(3)), at: Self.day(3))
        #expect(GranterStageTests().itemGranted(answer)?.userId == "user-c")
        #expect(try await store.balances(of: "user-c") == ["coins": 100])
    }

    /// An unclaimed consumable flagged at its deadline and clawed back, then its refund reversed: unclaimed again, and
    /// flagged at its deadline as unclaimed charges are.
    @Test func aReversedClawBackOfAnUnclaimedChargeIsFlaggedAgain() async throws {
        let charge = PurchaseRecord(key: key("c-2"), userId: .nobody, productId: "coins.100", productType: .consumable, quantity: 1, purchaseTime: Self.t0)
        _ = try await store.recordUnclaimed(charge, at: Self.t0)
        #expect(try await store.sweepDue(store: .appstore, deadline: 86_400, now: Self.day(2)).map(\.record.key) == [charge.key])
        _ = try await handle(RefundDue(store: .appstore, transactionId: "c-2", userId: nil, productId: "coins.100", state: nil, purchaseDate: Self.t0,
                                       deadline: Self.day(1), flaggedAt: Self.day(2)), at: Self.day(2))
        #expect(try await store.purchase(charge.key)?.state == .revoked)
        #expect(isSilent(try await handle(reversal("c-2", on: 3), at: Self.day(3))))
        #expect(try await store.purchase(charge.key)?.state == .unclaimed)
        #expect(try await store.sweepDue(store: .appstore, deadline: 86_400, now: Self.day(4)).map(\.record.key) == [charge.key])
    }

    /// A purchase recorded with a quantity `item.granted` does not take (a charge the store signed so, claimed since),
    /// refunded before its grant: its reversal is refused with a reason before anything is written. At the bound it is
    /// given and announced in an `item.granted` its schema takes.
    @Test func aReversalPastTheQuantityBoundIsRefusedBeforeAnythingIsWritten() async throws {
        for (id, quantity) in [("q-1", ItemGranted.quantities.upperBound + 1), ("q-2", ItemGranted.quantities.upperBound)] {
            let record = PurchaseRecord(key: key(TransactionID(id)), userId: "user-q", productId: "coins.100", productType: .consumable, quantity: quantity,
                                        purchaseTime: Self.t0)
            _ = try await store.recordVerified(record, at: Self.t0)
            _ = try await handle(PurchaseRevokedEvent(store: .appstore, transactionId: record.key.transactionId, reason: .REFUND, decidedAt: Self.day(1),
                                                      revokedAt: Self.day(1)), at: Self.day(1))
            let answer = try await handle(reversal(record.key.transactionId, on: 2), at: Self.day(2))
            if ItemGranted.quantities.contains(quantity) {
                let granted = try #require(GranterStageTests().itemGranted(answer), "\(answer)")
                #expect(granted.quantity == quantity && granted.reinstated == true && granted.userId == "user-q")
                #expect(try await store.purchase(record.key)?.state == .finished)
            } else {
                guard case .deadLetter(let reason, _) = answer else { Issue.record("\(answer)"); continue }
                #expect(reason == "quantityOutOfRange")
                #expect(try await store.purchase(record.key)?.state == .revoked)
                #expect(try await store.balances(of: "user-q").isEmpty)
            }
        }
        #expect(try await store.balances(of: "user-q") == ["coins": 100 * Int64(ItemGranted.quantities.upperBound)])
    }

    /// A season pass (90 days) bought in the last days an event can name, refunded before its grant, then the refund
    /// reversed: its grant ends at 9999-12-31, which `item.granted` can say, as the grant of another one bought then does.
    @Test func aPassBoughtInTheLastDaysAnEventCanNameEndsThen() async throws {
        let bought = try #require(EpochMilliseconds.date(EpochMilliseconds.latest - 10 * 86_400_000))
        let record = PurchaseRecord(key: key("p-1"), userId: "user-p", productId: "pass.season", productType: .nonRenewing, quantity: 1, purchaseTime: bought)
        _ = try await store.recordVerified(record, at: Self.t0)
        _ = try await handle(PurchaseRevokedEvent(store: .appstore, transactionId: "p-1", reason: .REFUND, decidedAt: Self.day(1), revokedAt: Self.day(1)),
                             at: Self.day(1))
        let reinstated = try #require(GranterStageTests().itemGranted(try await handle(reversal("p-1", on: 2), at: Self.day(2))), "refused by its schema")
        // Within a millisecond of the last: a date read back from its text.
        func endsAtTheLast(_ items: [GrantedItem]?) -> Bool {
            items?.count == 1 && items?.first?.expiresAt.map { abs($0.timeIntervalSince(EpochMilliseconds.latestDate)) < 0.002 } == true
        }
        #expect(endsAtTheLast(reinstated.items), "\(reinstated.items)")

        _ = try await store.recordVerified(PurchaseRecord(key: key("p-2"), userId: "user-p", productId: "pass.season", productType: .nonRenewing, quantity: 1,
                                                          purchaseTime: bought), at: Self.t0)
        let granted = try await handle(PurchaseVerifiedEvent(store: .appstore, transactionId: "p-2", productId: "pass.season", quantity: 1, userId: "user-p",
                                                              purchaseDate: bought, source: .client, verifiedAt: Self.t0), at: Self.t0)
        #expect(endsAtTheLast(GranterStageTests().itemGranted(granted)?.items), "\(granted)")
    }
}

import Foundation
import PurchaseDomain
import Testing

/// Which information about a subscription replaces what is stored: only newer information applies (notifications arrive
/// in any order), and what changed is named so that the change can be announced.
@Suite struct SubscriptionStatusTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_700_000)

    static func status(at offset: TimeInterval, willRenew: Bool? = true, product: ProductID? = "pass.monthly", pending: ProductID? = nil,
                       billingIssue: Bool = false, graceEnd: Date? = nil) -> SubscriptionStatus {
        let asOf = t0.addingTimeInterval(offset)
        return SubscriptionStatus(store: .appstore, originalTransactionId: "1000", productId: product, willRenew: willRenew, pendingProductId: pending,
                                  billingIssueSince: billingIssue ? asOf : nil, gracePeriodEndsAt: graceEnd, asOf: asOf)
    }

    @Test func theFirstStatusChangesWhatItSays() {
        #expect(SubscriptionStatus.update(nil, with: Self.status(at: 0)) == .changed(Self.status(at: 0), fields: [.productId, .willRenew]))
        let silent = SubscriptionStatus(store: .appstore, originalTransactionId: "1000", asOf: Self.t0)
        #expect(SubscriptionStatus.update(nil, with: silent) == .unchanged(silent), "kept, for its time; nothing to announce")
    }

    @Test func newerInformationReplacesWhatIsStoredAndNamesWhatChanged() {
        let stored = Self.status(at: 0)
        let disabled = Self.status(at: 60, willRenew: false)
        #expect(SubscriptionStatus.update(stored, with: disabled) == .changed(disabled, fields: [.willRenew]))
        let downgrade = Self.status(at: 60, pending: "pass.basic")
        #expect(SubscriptionStatus.update(stored, with: downgrade) == .changed(downgrade, fields: [.pendingProductId]))
    }

    @Test func olderOrSimultaneousInformationChangesNothing() {
        let stored = Self.status(at: 60, willRenew: false)
        #expect(SubscriptionStatus.update(stored, with: Self.status(at: 0)) == .stale, "signed earlier: arrived late")
        #expect(SubscriptionStatus.update(stored, with: Self.status(at: 60)) == .stale, "signed at the same millisecond: the stored one stands")
        #expect(SubscriptionStatus.update(stored, announced: [.willRenew], with: Self.status(at: 60, willRenew: false)) == .repeated(stored, fields: [.willRenew]),
                "the same information again: its announcement again")
        #expect(SubscriptionStatus.update(stored, with: Self.status(at: 60, willRenew: false)).announcement == nil, "one that had none: none")
        #expect(SubscriptionStatus.update(stored, with: Self.status(at: 60.0004)) == .stale, "times compare as they are kept, to the millisecond")
    }

    @Test func newerInformationSayingTheSameOnlyMovesTheTimeOn() {
        let stored = Self.status(at: 0)
        let later = Self.status(at: 120)
        #expect(SubscriptionStatus.update(stored, with: later) == .unchanged(later))
        // Then information signed in between is stale, although it differs from what the latest said.
        #expect(SubscriptionStatus.update(later, with: Self.status(at: 60, willRenew: false)) == .stale)
    }

    @Test func aBillingIssueKeepsTheTimeItWasFirstReported() {
        let graceEnd = Self.t0.addingTimeInterval(16 * 86_400)
        let failed = Self.status(at: 0, billingIssue: true, graceEnd: graceEnd)
        #expect(SubscriptionStatus.update(Self.status(at: -60), with: failed) == .changed(failed, fields: [.billingIssueSince, .gracePeriodEndsAt]))
        var stillFailing = Self.status(at: 3600, billingIssue: true, graceEnd: graceEnd)
        stillFailing.willRenew = false
        var expected = stillFailing
        expected.billingIssueSince = Self.t0
        #expect(SubscriptionStatus.update(failed, with: stillFailing) == .changed(expected, fields: [.willRenew]), "still since t0")
        let recovered = Self.status(at: 7200)
        #expect(SubscriptionStatus.update(expected, with: recovered) == .changed(recovered, fields: [.willRenew, .billingIssueSince, .gracePeriodEndsAt]))
    }

    @Test func theStoresCodesAreKeptAsSentBesideTheirNames() {
        var status = Self.status(at: 0)
        status.rawExpirationReason = 2
        status.rawPriceIncreaseStatus = 1
        status.rawOfferType = 9
        #expect(status.expirationReason == .billingError)
        #expect(status.priceIncreaseStatus == .consented)
        #expect(status.offerType == nil, "a code this version does not know: kept raw, named nothing")
        var other = status
        other.rawOfferType = 4
        #expect(status.fields(differingFrom: other) == [.offerType])
        #expect(other.offerType == .winBack)
    }
}

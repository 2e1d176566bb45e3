import PurchaseDomain
import Testing

/// A prorated refund takes back its share of each currency, rounded down; a full one (or a share of all) everything.
@Suite struct RefundShareTests {
    @Test func aShareTakesBackThatMuchRoundedDown() {
        #expect(RefundShare.takenBack(1000, share: nil) == 1000)
        #expect(RefundShare.takenBack(1000, share: 100_000) == 1000)
        #expect(RefundShare.takenBack(1000, share: 67_932) == 679, "67.932 % of 1000 is 679.32: never more than the store gave back")
        #expect(RefundShare.takenBack(1000, share: 15) == 0)
        #expect(RefundShare.takenBack(1000, share: 0) == 0)
        #expect(RefundShare.takenBack(1000, share: -5) == 0)
        #expect(RefundShare.takenBack(Int64.max, share: 50_000) <= Int64.max / 2 + 1, "no overflow")
    }

    @Test func onlyAProratedRefundHasAShare() {
        #expect(RefundShare.of(revocationType: "REFUND_PRORATED", revocationPercentage: 40_000) == 40_000)
        #expect(RefundShare.of(revocationType: "REFUND_PRORATED", revocationPercentage: 250_000) == 100_000)
        #expect(RefundShare.of(revocationType: "REFUND_PRORATED", revocationPercentage: nil) == nil)
        #expect(RefundShare.of(revocationType: "REFUND_FULL", revocationPercentage: 100_000) == nil)
        #expect(RefundShare.of(revocationType: "FAMILY_REVOKE", revocationPercentage: nil) == nil)
        #expect(RefundShare.of(revocationType: nil, revocationPercentage: 30_000) == nil)
    }
}

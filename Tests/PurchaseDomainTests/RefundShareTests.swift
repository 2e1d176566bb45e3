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

    @Test func refundedUnitsTakeBackTheirWorthRoundedDown() {
        #expect(RefundShare.takenBack(300, part: .units(1), of: 3) == 100, "exactly one unit's worth, no rounding of a share")
        #expect(RefundShare.takenBack(1000, part: .units(1), of: 3) == 333)
        #expect(RefundShare.takenBack(1000, part: .units(2), of: 3) == 666)
        #expect(RefundShare.takenBack(300, part: .units(3), of: 3) == 300)
        #expect(RefundShare.takenBack(300, part: .units(7), of: 3) == 300, "more units than bought: all of it")
        #expect(RefundShare.takenBack(300, part: .units(0), of: 3) == 0)
        #expect(RefundShare.takenBack(300, part: .share(50_000), of: 3) == 150)
        #expect(RefundShare.takenBack(300, part: nil, of: 3) == 300)
        #expect(RefundShare.takenBack(Int64.max, part: .units(999), of: 1000) <= Int64.max, "no overflow")
        #expect(RefundShare.part(share: 40_000, units: 2) == .units(2) && RefundShare.part(share: 40_000, units: nil) == .share(40_000))
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

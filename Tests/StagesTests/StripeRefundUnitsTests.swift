import Foundation
import JSON
import PurchaseDomain
@testable import Stages
import StoreVerification
import Testing

/// A Stripe refund of whole units of a multi-unit purchase is taken back by units, exactly: a share in steps of
/// 1/100,000 rounded down would leave a third of three 100-coin packs one coin short.
@Suite struct StripeRefundUnitsTests {
    func refund(_ refunded: Int64, of amount: Int64) -> StripeEvent {
        StripeEvent(JSONValue.object(["id": .string("evt_1"), "type": .string("charge.refunded"), "created": .integer(1_780_000_000),
                                      "data": .object(["object": .object(["id": .string("ch_1"), "object": .string("charge"), "amount": .integer(amount),
                                                                         "amount_refunded": .integer(refunded), "payment_intent": .string("pi_1"),
                                                                         "currency": .string("usd"), "refunded": .bool(refunded == amount)])])]).objectValue!)!
    }

    @Test func wholeUnitsAreTakenBackAsUnits() {
        #expect(VerifierStage.refundedUnits(refund(199, of: 597), quantity: 3) == 1)
        #expect(VerifierStage.refundedUnits(refund(398, of: 597), quantity: 3) == 2)
        #expect(RefundShare.takenBack(300, share: refund(199, of: 597).refundedShare ?? 0) == 99, "the share alone is a coin short")
    }

    @Test func otherRefundsAreLeftToTheShare() {
        #expect(VerifierStage.refundedUnits(refund(500, of: 1000), quantity: 3) == nil, "a unit and a half")
        #expect(VerifierStage.refundedUnits(refund(250, of: 1000), quantity: 1) == nil, "one unit: the share says how much of it")
        #expect(VerifierStage.refundedUnits(refund(597, of: 597), quantity: 3) == nil, "a full refund takes it all")
        #expect(VerifierStage.refundedUnits(refund(Int64.max / 2, of: Int64.max), quantity: 3) == nil, "no overflow")
    }
}

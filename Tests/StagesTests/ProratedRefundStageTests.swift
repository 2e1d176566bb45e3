import Foundation
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import StoreFixtures
import Testing

/// A prorated refund from the App Store's notification to the granter: the verifier carries its share on
/// `purchase.revoked`, and the granter takes back that share of the coins.
@Suite struct ProratedRefundStageTests {
    @Test func theVerifierCarriesTheShareAndTheGranterTakesItBack() async throws {
        let verifier = try await VerifierAnswerTests()
        let signer = JWSSigner(pki: VerifierAnswerTests.pki)
        let now = Date()
        let key = PurchaseKey(store: .appstore, transactionId: "800")
        _ = try await verifier.store.recordVerified(PurchaseRecord(key: key, userId: "u-prorated", productId: "coins.1000", productType: .consumable,
                                                                   quantity: 1, purchaseTime: now), at: now)
        _ = try await verifier.store.grant(key, items: [.currency("coins", 1000)], at: now)
        let refunded = try signer.sign(AppStorePayloads.transaction(transactionId: "800", productId: "coins.1000", bundleId: StageFixtures.bundle,
                                                                    revocationDate: now, extra: ["revocationType": .string("REFUND_PRORATED"),
                                                                                                 "revocationPercentage": .integer(40_000)]))
        let notification = StoreNotificationReceived(signedPayload: try signer.sign(AppStorePayloads.notification(
            type: .refund, bundleId: StageFixtures.bundle, appAppleId: nil, signedTransactionInfo: refunded)), receivedAt: now)
        let result = try await verifier.stage.handle(try StageFixtures.message(notification))
        let revoked = try #require(StageFixtures.published(result, as: PurchaseRevokedEvent.self).first)
        #expect(revoked.reason == .REFUND && revoked.refundShare == 40_000)

        let granter = GranterStageTests.granter(verifier.store, at: now)
        _ = try await granter.handle(try StageFixtures.message(revoked))
        #expect(try await verifier.store.balances(of: "u-prorated") == ["coins": 600], "40 % of 1000 taken back")
    }
}

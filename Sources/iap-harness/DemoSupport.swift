import PurchaseDomain
import Foundation
import PipelineHarness
import PurchaseEvents
import StoreFixtures
import StoreVerification

/// The demo's input (`PurchaseInput` after the demo's plan) and what the apps do afterwards: consume, restore, refund.
struct DemoPurchases {
    let input: PurchaseInput
    let restores: [PurchaseSubmitted]
    let now: Date

    var unique: [PurchaseInput.Purchase] { input.unique }

    static func make(plan: DemoCommand.Plan, users: Int, pki: TestPKI, codec: EventCodec, now: Date) throws -> DemoPurchases {
        var inputPlan = PurchaseInput.Plan(unique: plan.unique, users: users, firstTransactionId: 2_000_000_000_000)
        inputPlan.duplicates = plan.duplicates
        inputPlan.forged = plan.forged
        inputPlan.malformed = plan.malformed
        inputPlan.stale = plan.stale
        inputPlan.appAccountTokens = true
        let input = try PurchaseInput.make(inputPlan, pki: pki, codec: codec, now: now)
        let restores = input.unique.prefix(plan.consumed).suffix(plan.restores).map { PurchaseInput.submission($0, source: .restore, at: now) }
        return DemoPurchases(input: input, restores: restores, now: now)
    }

    /// Every user's coins: the sum of their purchases, each counted once, less the refund.
    func expectedHoldings(refunded: TransactionID) -> [UserID: DemoProductTypes.Holdings] {
        var expected: [UserID: DemoProductTypes.Holdings] = [:]
        for purchase in unique where purchase.transactionId != refunded {
            expected[purchase.user, default: .init()].balances["coins", default: 0] += purchase.coins
        }
        return expected
    }

    /// The apps consume every purchase but the stale ones.
    var consumptions: [PurchaseConsumed] {
        unique.filter { !$0.stale }.map { PurchaseConsumed(store: .appstore, transactionId: $0.transactionId, userId: $0.user, consumedAt: now) }
    }

    /// A REFUND notification for the first consumed purchase, signed like the App Store's.
    func refundNotification(pki: TestPKI) throws -> (event: StoreNotificationReceived, transactionId: TransactionID) {
        (try PurchaseInput.notification(.refund, of: unique[0], pki: pki, at: Date()), unique[0].transactionId)
    }
}

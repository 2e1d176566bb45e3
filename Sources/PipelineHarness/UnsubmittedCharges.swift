import Foundation
import PurchaseDomain
import StoreFixtures

/// App Store consumables paid for that the app never submitted (it died right after the payment, or was deleted): the
/// store announces each with `ONE_TIME_CHARGE`, and nothing else comes. A charge carrying the account token of a user
/// the pipeline knows goes to that user, once; one without a token stays unclaimed until its deadline flags it, once
/// (`refund.due` with `unclaimed: true`: the user paid and received nothing) — unless the store refunded it already
/// without a notification anybody received: the sweeper asks the store before it flags, and revokes it instead.
public struct UnsubmittedCharges: Sendable {
    /// Charges carrying their buyer's account token, paid now, each with the buyer's submitted purchase that bound the
    /// token (once it is recorded, the token is known).
    public let withToken: [(charge: PurchaseInput.Purchase, binding: TransactionID)]
    /// Charges without a token, paid two days ago (past the consume deadline).
    public let withoutToken: [PurchaseInput.Purchase]
    /// Charges without a token, paid two days ago, that the store refunded a day later with no `REFUND` sent (its
    /// *Get Transaction Info* says so), each with its refunded transaction as the store signs it.
    public let refundedUnannounced: [(charge: PurchaseInput.Purchase, refunded: String)]

    /// `count` charges of `input`'s App Store consumables, half of them with a token (of users with an App Store purchase
    /// of their own in `input`), one in four of the others refunded unannounced, their transaction ids from
    /// `firstTransactionId`, signed by `pki`.
    public static func make(count: Int, of input: PurchaseInput, pki: TestPKI, now: Date, firstTransactionId: Int64) throws -> UnsubmittedCharges {
        guard let product = input.plan.products.first(where: { $0.store == .appstore && $0.entitlement == nil }) else {
            throw HarnessError("unsubmitted charges: the plan sells no App Store consumable")
        }
        // Each user's first App Store purchase that carries the user's token.
        var bindings: [UserID: TransactionID] = [:]
        for purchase in input.unique where purchase.store == .appstore && input.accountTokens[purchase.user] != nil && bindings[purchase.user] == nil {
            bindings[purchase.user] = purchase.transactionId
        }
        let buyers = bindings.keys.sorted()
        guard count == 0 || !buyers.isEmpty else { throw HarnessError("unsubmitted charges: no user of the plan has an account token") }
        let signer = JWSSigner(pki: pki)
        var withToken: [(PurchaseInput.Purchase, TransactionID)] = [], withoutToken: [PurchaseInput.Purchase] = []
        var refunded: [(PurchaseInput.Purchase, String)] = []
        for index in 0..<count {
            let id = String(firstTransactionId + Int64(index))
            let tokened = index % 2 == 0
            let user = tokened ? buyers[(index / 2) % buyers.count] : UserID.nobody
            let purchased = tokened ? now : now.addingTimeInterval(-48 * 3600)
            let jws = try signer.sign(AppStorePayloads.transaction(
                transactionId: id, productId: product.id.rawValue, bundleId: StandInAppStore.bundleId, environment: .sandbox,
                type: .consumable, purchaseDate: purchased, signedDate: now, appAccountToken: tokened ? input.accountTokens[user] : nil))
            let charge = PurchaseInput.Purchase(store: .appstore, transactionId: TransactionID(id), user: user, product: product, jws: jws, stale: !tokened)
            if tokened, let binding = bindings[user] {
                withToken.append((charge, binding))
            } else if index % 8 == 7 {
                refunded.append((charge, try PurchaseInput.refundedTransaction(of: charge, pki: pki, at: purchased.addingTimeInterval(86_400))))
            } else {
                withoutToken.append(charge)
            }
        }
        return UnsubmittedCharges(withToken: withToken, withoutToken: withoutToken, refundedUnannounced: refunded)
    }

    public var count: Int { withToken.count + withoutToken.count + refundedUnannounced.count }

    /// Every charge, as the store announces it (`ONE_TIME_CHARGE`).
    public var all: [PurchaseInput.Purchase] { withToken.map(\.charge) + withoutToken + refundedUnannounced.map(\.charge) }

    /// Makes the charges known to `appStore`'s API as it keeps them: the refunded ones refunded.
    public func record(in appStore: StandInAppStore) {
        appStore.record(withToken.map(\.charge) + withoutToken)
        for (charge, refunded) in refundedUnannounced {
            appStore.api.recordTransaction(refunded, transactionId: charge.transactionId, originalTransactionId: charge.transactionId,
                                           customer: charge.user.rawValue, refunded: true)
        }
    }
}

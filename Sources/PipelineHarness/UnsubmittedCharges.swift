import Foundation
import PurchaseDomain
import StoreFixtures

/// Consumables paid for that the app never submitted (it died right after the payment, or was deleted): the store
/// announces each (the App Store with `ONE_TIME_CHARGE`, Google Play with a real-time developer notification), and
/// nothing else comes. A charge carrying the account token of a user the pipeline knows goes to that user, once; one
/// without a token stays unclaimed until its deadline flags it, once (`refund.due` with `unclaimed: true`: the user paid
/// and received nothing) — unless the App Store refunded it already without a notification anybody received: the
/// sweeper asks the store before it flags, and revokes it instead.
public struct UnsubmittedCharges: Sendable {
    /// Charges carrying their buyer's account token, paid now, each with the buyer's submitted purchase that bound the
    /// token (once it is recorded, the token is known).
    public let withToken: [(charge: PurchaseInput.Purchase, binding: TransactionID)]
    /// Charges without a token, paid longer ago than the store's consume deadline (App Store: two days; Google Play: four).
    public let withoutToken: [PurchaseInput.Purchase]
    /// Charges without a token, paid two days ago, that the store refunded a day later with no `REFUND` sent (its
    /// *Get Transaction Info* says so), each with its refunded transaction as the store signs it.
    public let refundedUnannounced: [(charge: PurchaseInput.Purchase, refunded: String)]

    /// `count` charges of `input`'s App Store consumables, half of them with a token (of users with an App Store purchase
    /// of their own in `input`), one in four of the others refunded unannounced, their transaction ids from
    /// `firstTransactionId`, signed by `pki`.
    public static func make(count: Int, of input: PurchaseInput, pki: TestPKI, now: Date, firstTransactionId: Int64) throws -> UnsubmittedCharges {
        let (product, bindings) = try consumable(of: .appstore, count: count, in: input)
        let buyers = bindings.keys.sorted()
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

    /// `count` Google Play consumables of `input`'s product, paid and never submitted: Google tells of each only by a
    /// real-time developer notification. Half carry their buyer's account token as the billing flow's
    /// `obfuscatedAccountId` (users as in `make`), paid now; the others none, paid four days ago (past Google's three).
    /// Made known to `googlePlay`'s API; order ids from `firstTransactionId` (`StandInGooglePlay.names`).
    public static func googlePlay(count: Int, of input: PurchaseInput, googlePlay: StandInGooglePlay, now: Date,
                                  firstTransactionId: Int64) throws -> UnsubmittedCharges {
        let (product, bindings) = try consumable(of: .googleplay, count: count, in: input)
        let buyers = bindings.keys.sorted()
        var withToken: [(PurchaseInput.Purchase, TransactionID)] = [], withoutToken: [PurchaseInput.Purchase] = []
        for index in 0..<count {
            let (order, token) = StandInGooglePlay.names(of: String(firstTransactionId + Int64(index)))
            let user = index % 2 == 0 ? buyers[(index / 2) % buyers.count] : UserID.nobody
            let accountToken = index % 2 == 0 ? input.accountTokens[user] : nil
            googlePlay.api.set(token, .init(packageName: PackageName(StandInGooglePlay.packageName), productId: product.id, orderId: order,
                                            obfuscatedExternalAccountId: accountToken,
                                            purchaseTime: accountToken == nil ? now.addingTimeInterval(-96 * 3600) : now))
            let charge = PurchaseInput.Purchase(store: .googleplay, transactionId: order, user: user, product: product, jws: "", stale: accountToken == nil)
            if let binding = bindings[user] { withToken.append((charge, binding)) } else { withoutToken.append(charge) }
        }
        return UnsubmittedCharges(withToken: withToken, withoutToken: withoutToken, refundedUnannounced: [])
    }

    /// The consumable `input` sells on `store`, and each user's first App Store purchase that carries the user's token
    /// (once it is recorded, the token is known); throws unless there are such users for `count` charges.
    private static func consumable(of store: Store, count: Int, in input: PurchaseInput) throws -> (PurchaseInput.Product, [UserID: TransactionID]) {
        guard let product = input.plan.products.first(where: { $0.store == store && $0.entitlement == nil }) else {
            throw HarnessError("unsubmitted charges: the plan sells no \(store.rawValue) consumable")
        }
        var bindings: [UserID: TransactionID] = [:]
        for purchase in input.purchases(of: .appstore) where input.accountTokens[purchase.user] != nil && bindings[purchase.user] == nil {
            bindings[purchase.user] = purchase.transactionId
        }
        guard count == 0 || !bindings.isEmpty else { throw HarnessError("unsubmitted charges: no user of the plan has an account token") }
        return (product, bindings)
    }

    public var count: Int { withToken.count + withoutToken.count + refundedUnannounced.count }

    /// These charges and `other`'s together (one store's and another's, for the books).
    public func adding(_ other: UnsubmittedCharges) -> UnsubmittedCharges {
        UnsubmittedCharges(withToken: withToken + other.withToken, withoutToken: withoutToken + other.withoutToken,
                           refundedUnannounced: refundedUnannounced + other.refundedUnannounced)
    }

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

import Foundation
import JSON
import PurchaseDomain

extension SubscriptionStatus {
    /// The status `purchase` (a `subscriptionsv2` answer) tells of the subscription `originalTransactionId` (its first
    /// token, or the token of the subscription it continues), as read at `asOf`: Google signs no time of its own, and
    /// each read is the whole status then.
    ///
    /// - `willRenew`: the line item's `autoRenewingPlan.autoRenewEnabled`; false once canceled or expired.
    /// - `pendingProductId`: `deferredItemReplacement.productId`, a replacement waiting for the renewal.
    /// - `billingIssueSince`: in the grace period or on account hold (renewing failed on payment), first seen then.
    /// - `gracePeriodEndsAt`: in the grace period, the line item's `expiryTime` (Google moves it to the grace period's end).
    /// - `pausedUntil`: paused, `pausedStateContext.autoResumeTime`.
    /// - `priceIncreaseStatus`: a price change `OUTSTANDING` 0, `CONFIRMED` or `APPLIED` 1.
    /// - `expirationReason`: canceled or expired, from `canceledStateContext` as the App Store's codes say it: by the
    ///   customer 1, by the system (a billing problem) 2, replaced by another subscription or by the developer 5.
    /// - `offerIdentifier`: the line item's `offerDetails.offerId`.
    public init(googlePlay purchase: GooglePlaySubscriptionPurchase, originalTransactionId: TransactionID, asOf: Date) {
        let fields = JSONFields(object: purchase.raw)
        let items = (purchase.raw["lineItems"]?.arrayValue ?? []).compactMap(\.objectValue).map(JSONFields.init)
        let item = items.first { $0.identifier("productId") == purchase.productId } ?? items.first
        let plan = item?.object("autoRenewingPlan")
        let ended = purchase.state == .canceled || purchase.state == .expired
        let billingIssue = purchase.state == .inGracePeriod || purchase.state == .onHold
        let priceChange: Int64? = switch plan?.object("priceChangeDetails")?.string("priceChangeState") {
        case "OUTSTANDING": SubscriptionStatus.PriceIncreaseStatus.notResponded.rawValue
        case "CONFIRMED", "APPLIED": SubscriptionStatus.PriceIncreaseStatus.consented.rawValue
        default: nil
        }
        self.init(store: .googleplay, originalTransactionId: originalTransactionId, productId: purchase.productId,
                  willRenew: ended ? false : plan?.bool("autoRenewEnabled"),
                  pendingProductId: item?.object("deferredItemReplacement")?.identifier("productId").flatMap { $0 == purchase.productId ? nil : $0 },
                  billingIssueSince: billingIssue ? asOf : nil,
                  gracePeriodEndsAt: purchase.state == .inGracePeriod ? purchase.expiryTime : nil,
                  pausedUntil: purchase.state == .paused ? fields.object("pausedStateContext")?.string("autoResumeTime").flatMap(RFC3339.parse) : nil,
                  rawPriceIncreaseStatus: priceChange,
                  rawExpirationReason: ended ? fields.object("canceledStateContext").flatMap(Self.expirationReason) : nil,
                  offerIdentifier: item?.object("offerDetails")?.string("offerId").flatMap { $0.isEmpty ? nil : String($0.prefix(256)) },
                  asOf: asOf)
    }

    /// The status a verified Google Play subscription purchase tells (`VerifiedPurchase.raw` holds the whole
    /// `subscriptionsv2` answer), of the subscription it belongs to (`originalTransactionId`); nil for any other purchase.
    public init?(googlePlaySubscription verified: VerifiedPurchase, asOf: Date) {
        let original = verified.originalTransactionId ?? verified.transactionId
        guard verified.store == .googleplay,
              let purchase = GooglePlaySubscriptionPurchase(answer: verified.raw, packageName: PackageName(""), productId: verified.productId,
                                                            purchaseToken: PurchaseToken(original)) else { return nil }
        self.init(googlePlay: purchase, originalTransactionId: original, asOf: asOf)
    }

    /// `canceledStateContext` as an App Store `expirationIntent` code.
    private static func expirationReason(_ context: JSONFields) -> Int64? {
        if context.object("userInitiatedCancellation") != nil { return ExpirationReason.customerCancelled.rawValue }
        if context.object("systemInitiatedCancellation") != nil { return ExpirationReason.billingError.rawValue }
        if context.object("replacementCancellation") != nil || context.object("developerInitiatedCancellation") != nil {
            return ExpirationReason.other.rawValue
        }
        return nil
    }
}

import Foundation
import PurchaseDomain

extension AppStoreNotification {
    /// The status of the subscription its renewal info describes, as of the notification's signing (else the renewal
    /// info's); the notification's type and subtype fill in what the renewal info leaves out (an `EXPIRED` subtype's
    /// reason, a `PRICE_INCREASE` subtype's answer, `DID_FAIL_TO_RENEW`'s billing issue). Nil without a renewal info, without
    /// a signed date to order it by, or when the renewal info is of another subscription than the notification's
    /// transaction (signed data that contradicts itself is not taken for either).
    public var subscriptionStatus: SubscriptionStatus? {
        guard let info = renewalInfo, let asOf = signedDate ?? info.signedDate else { return nil }
        if let transaction, info.originalTransactionId != (transaction.originalTransactionId ?? transaction.transactionId) { return nil }
        return SubscriptionStatus(info, productId: info.productId ?? transaction?.productId, asOf: asOf, notificationType: notificationType, subtype: subtype)
    }

    /// `EXPIRED`'s subtypes as `expirationIntent` codes.
    static let expirationReasons: [String: Int64] = [
        "VOLUNTARY": SubscriptionStatus.ExpirationReason.customerCancelled.rawValue,
        "BILLING_RETRY": SubscriptionStatus.ExpirationReason.billingError.rawValue,
        "PRICE_INCREASE": SubscriptionStatus.ExpirationReason.priceIncreaseDeclined.rawValue,
        "PRODUCT_NOT_FOR_SALE": SubscriptionStatus.ExpirationReason.productNotAvailable.rawValue,
    ]

    /// `PRICE_INCREASE`'s subtypes as `priceIncreaseStatus` codes.
    static let priceIncreaseAnswers: [String: Int64] = [
        "PENDING": SubscriptionStatus.PriceIncreaseStatus.notResponded.rawValue,
        "ACCEPTED": SubscriptionStatus.PriceIncreaseStatus.consented.rawValue,
    ]
}

extension SubscriptionStatus {
    /// The status a verified renewal info tells as of `asOf` (the product its subscription is on: `productId`); a
    /// notification's type and subtype, when it came in one, fill in what the renewal info leaves out.
    public init(_ info: AppStoreRenewalInfo, productId: ProductID?, asOf: Date, notificationType: AppStoreNotificationType? = nil,
                subtype: String? = nil) {
        let inBillingRetry = info.isInBillingRetryPeriod ?? (notificationType == .didFailToRenew)
        self.init(
            store: .appstore, originalTransactionId: info.originalTransactionId, productId: productId,
            willRenew: info.autoRenewStatus.flatMap { $0 == 1 ? true : $0 == 0 ? false : nil },
            pendingProductId: info.autoRenewProductId.map { ProductID($0) }.flatMap { $0 == productId ? nil : $0 },
            billingIssueSince: inBillingRetry ? asOf : nil, gracePeriodEndsAt: info.gracePeriodExpiresDate,
            rawPriceIncreaseStatus: info.priceIncreaseStatus
                ?? (notificationType == .priceIncrease ? AppStoreNotification.priceIncreaseAnswers[subtype ?? ""] : nil),
            rawExpirationReason: info.expirationIntent ?? (notificationType == .expired ? AppStoreNotification.expirationReasons[subtype ?? ""] : nil),
            rawOfferType: info.offerType, offerIdentifier: info.offerIdentifier, asOf: asOf)
    }
}

import Foundation
import PurchaseDomain

/// `subscription.status`: what the store now says of a subscription's renewal, for the app's backend to message its
/// user (a renewal turned off, a billing issue, a grace period ending, a price increase to accept, a pending downgrade,
/// why it expired). Written by the verifier when a store notification changes the recorded status; `changed` names
/// what changed. Information older than what is recorded changes nothing and is not announced.
public struct SubscriptionStatusChanged: PipelineEvent, Hashable {
    public static let type = EventType.subscriptionStatus
    public var store: Store
    public var originalTransactionId: TransactionID
    /// Who owns the subscription; nil while no purchase of it is recorded for a user.
    public var userId: UserID?
    public var productId: ProductID?
    /// Whether it renews at the end of the period; absent when the store did not say.
    public var willRenew: Bool?
    /// The product it renews to, when not `productId` (a downgrade or crossgrade waiting for the renewal).
    public var pendingProductId: ProductID?
    /// Since when renewing fails on billing; absent without a billing issue.
    public var billingIssueSince: Date?
    /// When the billing grace period ends (service continues until then).
    public var gracePeriodEndsAt: Date?
    /// Paused by the customer (Google Play) until then; absent while not paused.
    public var pausedUntil: Date?
    /// The store's code (App Store `priceIncreaseStatus`: 0 not responded, 1 consented).
    public var priceIncreaseStatus: Int64?
    /// The store's code (App Store `expirationIntent`: 1 cancelled, 2 billing error, 3 price increase declined, 4 product
    /// not for sale, 5 other).
    public var expirationReason: Int64?
    /// The store's code (App Store `offerType`: 1 introductory, 2 promotional, 3 offer code, 4 win-back).
    public var offerType: Int64?
    public var offerIdentifier: String?
    /// The fields that changed, in a fixed order.
    public var changed: [SubscriptionStatus.Field]
    /// The store notification that said it (App Store `notificationType` and `subtype`).
    public var notificationType: String?
    public var notificationSubtype: String?
    /// When the store signed the information.
    public var asOf: Date
    public var announcedAt: Date

    /// The event announcing `status` for `userId`, `changed` by the notification `notificationType` (`subtype`).
    public init(_ status: SubscriptionStatus, userId: UserID?, changed: [SubscriptionStatus.Field], notificationType: String?,
                notificationSubtype: String?, announcedAt: Date) {
        store = status.store
        originalTransactionId = status.originalTransactionId
        self.userId = userId
        productId = status.productId
        willRenew = status.willRenew
        pendingProductId = status.pendingProductId
        billingIssueSince = status.billingIssueSince
        gracePeriodEndsAt = status.gracePeriodEndsAt
        pausedUntil = status.pausedUntil
        priceIncreaseStatus = status.rawPriceIncreaseStatus
        expirationReason = status.rawExpirationReason
        offerType = status.rawOfferType
        offerIdentifier = status.offerIdentifier
        self.changed = changed
        self.notificationType = notificationType
        self.notificationSubtype = notificationSubtype
        asOf = status.asOf
        self.announcedAt = announcedAt
    }

    /// The status it announces.
    public var status: SubscriptionStatus {
        SubscriptionStatus(store: store, originalTransactionId: originalTransactionId, productId: productId, willRenew: willRenew,
                           pendingProductId: pendingProductId, billingIssueSince: billingIssueSince, gracePeriodEndsAt: gracePeriodEndsAt,
                           pausedUntil: pausedUntil, rawPriceIncreaseStatus: priceIncreaseStatus, rawExpirationReason: expirationReason, rawOfferType: offerType,
                           offerIdentifier: offerIdentifier, asOf: asOf)
    }

    /// Keyed by the user when one owns it (their events stay in order with each other), else by the subscription.
    public var messageKey: Data? { Data((userId.map(\.rawValue) ?? "subscription:\(store.rawValue):\(originalTransactionId)").utf8) }
    /// One status per subscription and signing time: a redelivered notification's announcement keeps its id.
    public var eventID: String { "subscriptionStatus:\(store.rawValue):\(originalTransactionId):\(EpochMilliseconds.milliseconds(asOf))" }
}

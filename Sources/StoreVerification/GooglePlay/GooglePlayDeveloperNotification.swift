import Foundation
import JSON
import PurchaseDomain

/// A Google Play real-time developer notification (the `DeveloperNotification` a Pub/Sub push message's data holds):
/// which app, and what it tells of which purchase. A hint only: the purchase is read again from the API.
public struct GooglePlayDeveloperNotification: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        /// `subscriptionNotification`: `notificationType` 1 recovered, 2 renewed, 3 canceled, 4 purchased, 5 on hold, 6 in
        /// grace period, 7 restarted, 9 deferred, 10 paused, 12 revoked, 13 expired, 20 pending purchase canceled, ….
        /// `productId`: its `subscriptionId`, which Google deprecated and may leave out (nil): `purchases.subscriptionsv2`
        /// needs the token alone, and its answer names the product.
        case subscription(type: Int64, purchaseToken: PurchaseToken, productId: ProductID?)
        /// `oneTimeProductNotification`: 1 purchased, 2 a pending purchase canceled.
        case oneTimeProduct(type: Int64, purchaseToken: PurchaseToken, productId: ProductID)
        /// `voidedPurchaseNotification`: refunded, canceled or charged back; `partial`: `refundType` 2, a quantity-based
        /// partial refund of a multi-quantity purchase (the notification does not say how many units: the voided-purchases
        /// list does, with its `voidedQuantity`).
        case voided(purchaseToken: PurchaseToken, orderId: TransactionID?, partial: Bool)
        /// `testNotification`, sent from the Play Console.
        case test
    }

    public var packageName: PackageName
    public var eventTime: Date?
    public var kind: Kind

    /// The notification `text` holds; nil for one that is not JSON, names no package, or carries none of the four kinds.
    public init?(json text: String) {
        guard let fields = JSONValue.parse(Array(text.utf8))?.objectValue.map(JSONFields.init), let package = fields.string("packageName"),
              !package.isEmpty else { return nil }
        packageName = PackageName(package)
        eventTime = fields.int64("eventTimeMillis").flatMap(EpochMilliseconds.date)
        if let subscription = fields.object("subscriptionNotification") {
            guard let type = subscription.int64("notificationType"), let token: PurchaseToken = subscription.identifier("purchaseToken") else { return nil }
            kind = .subscription(type: type, purchaseToken: token, productId: subscription.string("subscriptionId").flatMap { $0.isEmpty ? nil : ProductID($0) })
        } else if let product = fields.object("oneTimeProductNotification") {
            guard let type = product.int64("notificationType"), let token: PurchaseToken = product.identifier("purchaseToken"),
                  let sku: ProductID = product.identifier("sku") else { return nil }
            kind = .oneTimeProduct(type: type, purchaseToken: token, productId: sku)
        } else if let voided = fields.object("voidedPurchaseNotification") {
            guard let token: PurchaseToken = voided.identifier("purchaseToken") else { return nil }
            kind = .voided(purchaseToken: token, orderId: voided.string("orderId").flatMap { $0.isEmpty ? nil : TransactionID($0) },
                           partial: voided.int64("refundType") == 2)
        } else if fields.object("testNotification") != nil {
            kind = .test
        } else {
            return nil
        }
    }

    /// The text of a subscription notification as Google pushes it (a `DeveloperNotification`), of `type` (2 renewed, 6 in
    /// grace period, …) about `purchaseToken` of `productId`, sent at `eventTime`: the notification a change Google made
    /// would have come with, for one whose notification never came. The same arguments give the same text.
    public static func subscriptionNotificationText(packageName: PackageName, type: Int64, purchaseToken: PurchaseToken, productId: ProductID,
                                                    eventTime: Date) -> String {
        JSONValue.object([
            "version": .string("1.0"), "packageName": .string(packageName.rawValue),
            "eventTimeMillis": .string(String(EpochMilliseconds.milliseconds(eventTime))),
            "subscriptionNotification": .object(["version": .string("1.0"), "notificationType": .integer(type),
                                                 "purchaseToken": .string(purchaseToken.rawValue), "subscriptionId": .string(productId.rawValue)]),
        ]).serializedText
    }

    /// `subscriptionNotification`'s `notificationType` under Google's name (`SUBSCRIPTION_RENEWED`, …), as announcements
    /// carry it; a type this version does not know by its number.
    public static func subscriptionTypeName(_ type: Int64) -> String {
        subscriptionTypeNames[type].map { "SUBSCRIPTION_\($0)" } ?? "SUBSCRIPTION_NOTIFICATION_\(type)"
    }

    private static let subscriptionTypeNames: [Int64: String] = [
        1: "RECOVERED", 2: "RENEWED", 3: "CANCELED", 4: "PURCHASED", 5: "ON_HOLD", 6: "IN_GRACE_PERIOD", 7: "RESTARTED",
        8: "PRICE_CHANGE_CONFIRMED", 9: "DEFERRED", 10: "PAUSED", 11: "PAUSE_SCHEDULE_CHANGED", 12: "REVOKED", 13: "EXPIRED",
        19: "PRICE_CHANGE_UPDATED", 20: "PENDING_PURCHASE_CANCELED",
    ]

    /// The purchase token it is about (nil: a test notification).
    public var purchaseToken: PurchaseToken? {
        switch kind {
        case .subscription(_, let token, _), .oneTimeProduct(_, let token, _), .voided(let token, _, _): token
        case .test: nil
        }
    }
}

import Foundation
import HTTPServer
import JSON
import PurchaseDomain

/// The stand-in's subscriptions, as Google documents them:
/// - `GET …/applications/{package}/purchases/subscriptionsv2/tokens/{token}` answers the `SubscriptionPurchaseV2` of a
///   token it was given for that package (one line item); 404 for another, 410 for one made invalid.
/// - `POST …/applications/{package}/purchases/subscriptions/{subscriptionId}/tokens/{token}:acknowledge` acknowledges it;
///   400 when it is pending or acknowledged already, 404 for another product.
extension GooglePlayAPIStandIn {
    /// One subscription purchase (one purchase token) Google knows: its current period and state.
    public struct Subscription: Sendable {
        public var packageName: PackageName
        public var productId: ProductID
        /// `SUBSCRIPTION_STATE_ACTIVE`, `…_PENDING`, `…_IN_GRACE_PERIOD`, `…_ON_HOLD`, `…_PAUSED`, `…_CANCELED`, `…_EXPIRED`,
        /// `…_PENDING_PURCHASE_CANCELED`.
        public var state: String
        /// The latest successful order (`GPA.…`, `..0` for the first, `..1` for the first renewal, …); nil while pending.
        public var latestOrderId: TransactionID?
        public var startTime: Date
        public var expiryTime: Date
        public var acknowledged: Bool
        /// The purchase token of the subscription this one replaced (an upgrade, a downgrade, a re-signup).
        public var linkedPurchaseToken: PurchaseToken?
        /// A license tester's (never charged): `testPurchase` is in the answer.
        public var test: Bool
        public var obfuscatedExternalAccountId: String?
        /// Paused: when it resumes (`pausedStateContext.autoResumeTime`).
        public var autoResumeTime: Date?
        /// Canceled or expired: who ended it, the `canceledStateContext` member (`userInitiatedCancellation`,
        /// `systemInitiatedCancellation`, `developerInitiatedCancellation`, `replacementCancellation`).
        public var cancellation: String?

        public init(packageName: PackageName, productId: ProductID, state: String = "SUBSCRIPTION_STATE_ACTIVE", latestOrderId: TransactionID?,
                    startTime: Date = Date(), expiryTime: Date, acknowledged: Bool = false, linkedPurchaseToken: PurchaseToken? = nil, test: Bool = false,
                    obfuscatedExternalAccountId: String? = nil, autoResumeTime: Date? = nil, cancellation: String? = nil) {
            self.packageName = packageName
            self.productId = productId
            self.state = state
            self.latestOrderId = latestOrderId
            self.startTime = startTime
            self.expiryTime = expiryTime
            self.acknowledged = acknowledged
            self.linkedPurchaseToken = linkedPurchaseToken
            self.test = test
            self.obfuscatedExternalAccountId = obfuscatedExternalAccountId
            self.autoResumeTime = autoResumeTime
            self.cancellation = cancellation
        }
    }

    /// The answer to a subscription request (`parts`: the path after `applications/`, decoded), nil for any other.
    static func subscriptionRoutes(_ method: String, _ parts: [String], action: String, registry: Registry) -> HTTPResponse? {
        let token: PurchaseToken
        let product: ProductID?
        switch (method, action) {
        case ("GET", "") where parts.count == 5 && parts[1] == "purchases" && parts[2] == "subscriptionsv2" && parts[3] == "tokens":
            (token, product) = (PurchaseToken(parts[4]), nil)
        case ("POST", "acknowledge") where parts.count == 6 && parts[1] == "purchases" && parts[2] == "subscriptions" && parts[4] == "tokens":
            (token, product) = (PurchaseToken(parts[5]), ProductID(parts[3]))
        default:
            return nil
        }
        return registry.books.withLock { books -> HTTPResponse in
            if books.invalid.contains(token) { return error(410, "The purchase token is no longer valid.", "NOT_FOUND") }
            guard var subscription = books.subscriptions[token], subscription.packageName == PackageName(parts[0]),
                  product.map({ $0 == subscription.productId }) ?? true else {
                return error(404, "The purchase token was not found.", "NOT_FOUND")
            }
            guard product != nil else {
                return HTTPResponse(status: 200, contentType: "application/json", body: subscriptionPurchase(subscription).serializedText)
            }
            guard !subscription.acknowledged, subscription.state != "SUBSCRIPTION_STATE_PENDING" else {
                return error(400, "The subscription purchase is not in a valid state to perform the desired operation.", "FAILED_PRECONDITION")
            }
            subscription.acknowledged = true
            books.subscriptions[token] = subscription
            books.acknowledgedSubscriptions[token, default: 0] += 1
            return HTTPResponse(status: 200)
        }
    }

    static func subscriptionPurchase(_ subscription: Subscription) -> JSONValue {
        var item: [String: JSONValue] = [
            "productId": .string(subscription.productId.rawValue), "expiryTime": .string(RFC3339.format(subscription.expiryTime)),
            // Google goes on trying to renew through a grace period, an account hold and a pause.
            "autoRenewingPlan": .object(["autoRenewEnabled": .bool(["SUBSCRIPTION_STATE_ACTIVE", "SUBSCRIPTION_STATE_IN_GRACE_PERIOD",
                                                                    "SUBSCRIPTION_STATE_ON_HOLD", "SUBSCRIPTION_STATE_PAUSED"].contains(subscription.state))]),
        ]
        if let order = subscription.latestOrderId { item["latestSuccessfulOrderId"] = .string(order.rawValue) }
        var body: [String: JSONValue] = [
            "kind": .string("androidpublisher#subscriptionPurchaseV2"), "regionCode": .string("US"), "lineItems": .array([.object(item)]),
            "startTime": .string(RFC3339.format(subscription.startTime)), "subscriptionState": .string(subscription.state),
            "acknowledgementState": .string(subscription.acknowledged ? "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED" : "ACKNOWLEDGEMENT_STATE_PENDING"),
        ]
        if let order = subscription.latestOrderId { body["latestOrderId"] = .string(order.rawValue) }
        if let linked = subscription.linkedPurchaseToken { body["linkedPurchaseToken"] = .string(linked.rawValue) }
        if subscription.test { body["testPurchase"] = .object([:]) }
        if subscription.state == "SUBSCRIPTION_STATE_PAUSED", let resume = subscription.autoResumeTime {
            body["pausedStateContext"] = .object(["autoResumeTime": .string(RFC3339.format(resume))])
        }
        if ["SUBSCRIPTION_STATE_CANCELED", "SUBSCRIPTION_STATE_EXPIRED"].contains(subscription.state), let cancellation = subscription.cancellation {
            body["canceledStateContext"] = .object([cancellation: .object([:])])
        }
        if let account = subscription.obfuscatedExternalAccountId {
            body["externalAccountIdentifiers"] = .object(["obfuscatedExternalAccountId": .string(account)])
        }
        return .object(body)
    }
}

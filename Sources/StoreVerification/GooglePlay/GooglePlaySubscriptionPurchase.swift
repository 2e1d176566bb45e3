import Foundation
import JSON
import PurchaseDomain

/// A subscription purchase as the Android Publisher API reports it (`purchases.subscriptionsv2.get`, a
/// `SubscriptionPurchaseV2`): one purchase token for the subscription's whole life, each renewal a new order. The typed
/// fields the pipeline decides by, the raw state beside them, and the whole answer in `raw`.
public struct GooglePlaySubscriptionPurchase: Sendable, Hashable {
    /// `subscriptionState` as Google names it; the raw text is kept for states this version does not know.
    public struct State: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        public static let pending = Self(rawValue: "SUBSCRIPTION_STATE_PENDING")
        public static let active = Self(rawValue: "SUBSCRIPTION_STATE_ACTIVE")
        public static let paused = Self(rawValue: "SUBSCRIPTION_STATE_PAUSED")
        public static let inGracePeriod = Self(rawValue: "SUBSCRIPTION_STATE_IN_GRACE_PERIOD")
        public static let onHold = Self(rawValue: "SUBSCRIPTION_STATE_ON_HOLD")
        public static let canceled = Self(rawValue: "SUBSCRIPTION_STATE_CANCELED")
        public static let expired = Self(rawValue: "SUBSCRIPTION_STATE_EXPIRED")
        public static let pendingPurchaseCanceled = Self(rawValue: "SUBSCRIPTION_STATE_PENDING_PURCHASE_CANCELED")
    }

    public var packageName: PackageName
    public var purchaseToken: PurchaseToken
    /// The line item's product (the subscription's product id).
    public var productId: ProductID
    public var state: State
    /// The latest successful order of the line item (`GPA.…..0` at signup, `..1` at the first renewal, …); nil while the
    /// signup is pending.
    public var latestOrderId: TransactionID?
    public var startTime: Date?
    /// When the period paid for ends (access ends then unless Google extends it, as in a grace period).
    public var expiryTime: Date?
    public var isAcknowledged: Bool
    /// The token of the subscription this purchase replaced (an upgrade, a downgrade, a re-signup before the old one lapsed).
    public var linkedPurchaseToken: PurchaseToken?
    /// A license tester's purchase, never charged.
    public var isTest: Bool
    public var obfuscatedExternalAccountId: String?
    public var raw: [String: JSONValue]

    /// The id effects are keyed by: the period's order id, or the purchase token where the API gives none.
    public var transactionId: TransactionID { latestOrderId ?? TransactionID(purchaseToken) }

    /// The subscription an answer describes, its line item of `productId` (or its only one; nil: its first); nil without
    /// a state or line item, or a product.
    init?(answer fields: [String: JSONValue], packageName: PackageName, productId: ProductID?, purchaseToken: PurchaseToken) {
        let json = JSONFields(object: fields)
        let items = (fields["lineItems"]?.arrayValue ?? []).compactMap(\.objectValue).map(JSONFields.init)
        let named = productId.flatMap { asked in items.first { $0.identifier("productId") == asked } }
        guard let state = json.string("subscriptionState"), let item = named ?? (items.count == 1 || productId == nil ? items.first : nil),
              let product = item.string("productId").flatMap({ $0.isEmpty ? nil : ProductID($0) }) ?? productId else { return nil }
        self.packageName = packageName
        self.purchaseToken = purchaseToken
        self.productId = product
        self.state = State(rawValue: state)
        latestOrderId = (item.string("latestSuccessfulOrderId") ?? json.string("latestOrderId")).flatMap { $0.isEmpty ? nil : TransactionID($0) }
        startTime = json.string("startTime").flatMap(RFC3339.parse)
        expiryTime = item.string("expiryTime").flatMap(RFC3339.parse)
        isAcknowledged = json.string("acknowledgementState") == "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED"
        linkedPurchaseToken = json.string("linkedPurchaseToken").flatMap { $0.isEmpty ? nil : PurchaseToken($0) }
        isTest = fields["testPurchase"] != nil
        obfuscatedExternalAccountId = json.object("externalAccountIdentifiers")?.string("obfuscatedExternalAccountId")
        raw = fields
    }
}

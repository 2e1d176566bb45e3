import Foundation
import PurchaseDomain

/// `purchase.revoked`: what the store decided about a purchase after its payment, for the granter to carry out:
/// refunded or revoked (the grant is clawed back; before the purchase is seen, a tombstone), a refund reversed
/// (granted again), a subscription ended (its entitlement ends).
public struct PurchaseRevokedEvent: PipelineEvent, Hashable {
    public static let type = EventType.purchaseRevoked
    public enum Reason: String, Codable, Sendable, CaseIterable { case REFUND, REVOKE, REFUND_REVERSED, EXPIRED, GRACE_PERIOD_EXPIRED }
    public var store: Store
    public var transactionId: TransactionID
    /// The subscription the transaction belongs to (renewals share it): an expiry's key. An expiry ends what
    /// `transactionId`, the period that expired, and the subscription's earlier periods gave; not a later period's.
    public var originalTransactionId: TransactionID?
    public var userId: UserID?
    public var productId: ProductID?
    public var reason: Reason
    public var revocationDate: Date?
    /// A prorated refund's share, in thousandths of a percent (`RefundShare`); nil: all of it.
    public var refundShare: Int64?
    /// A quantity-based partial refund's units of a multi-quantity purchase (Google Play's `voidedQuantity`): that many
    /// units' worth is taken back (`RefundShare.Part.units`); nil: the whole purchase, or `refundShare` of it.
    public var refundedQuantity: Int?
    public var notificationUUID: String?
    /// When the store decided (its notification's `signedDate`): a refund and its reversal are carried out in this order,
    /// whichever comes first (their notifications are not ordered with each other), and a decision older than one taken
    /// changes nothing. Absent from producers before it: such an event is carried out in the order it comes.
    public var decidedAt: Date?
    public var revokedAt: Date

    public init(store: Store, transactionId: TransactionID, originalTransactionId: TransactionID? = nil, userId: UserID? = nil, productId: ProductID? = nil,
                reason: Reason, revocationDate: Date? = nil, refundShare: Int64? = nil, refundedQuantity: Int? = nil, notificationUUID: String? = nil,
                decidedAt: Date? = nil, revokedAt: Date) {
        self.refundShare = refundShare
        self.refundedQuantity = refundedQuantity
        self.originalTransactionId = originalTransactionId
        self.store = store
        self.transactionId = transactionId
        self.userId = userId
        self.productId = productId
        self.reason = reason
        self.revocationDate = revocationDate
        self.notificationUUID = notificationUUID
        self.decidedAt = decidedAt
        self.revokedAt = revokedAt
    }

    /// Keyed by the transaction (the subscription for an expiry), not the user: a refund, its reversal and its
    /// purchase's owner may be unknown or change, and these must stay in order with each other.
    public var messageKey: Data? { Data("store:\(store.rawValue):\(subject)".utf8) }
    public var eventID: String {
        switch reason {
        case .REFUND, .REVOKE: "revoked:\(store.rawValue):\(transactionId)"
        case .REFUND_REVERSED: "reinstated:\(store.rawValue):\(transactionId)"
        // A subscription can end more than once (resubscribed in between): one id per notification.
        case .EXPIRED, .GRACE_PERIOD_EXPIRED: "expired:\(store.rawValue):\(subject):\(notificationUUID ?? transactionId.rawValue)"
        }
    }

    private var subject: TransactionID {
        reason == .EXPIRED || reason == .GRACE_PERIOD_EXPIRED ? originalTransactionId ?? transactionId : transactionId
    }
}

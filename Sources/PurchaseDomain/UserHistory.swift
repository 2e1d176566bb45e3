import Foundation

/// What happened to a user's purchases and items, newest first, as support reads it: each purchase's steps through its
/// lifecycle (with the reason of a rejection or a revocation), each submission refused (with its reason), each grant, revocation, regrant and transfer of an item
/// in the ledger (with what a revocation could not take back), and the user's consent decision.
public struct UserHistory: Sendable, Hashable, Codable {
    /// What happened.
    public enum Kind: String, Sendable, Hashable, Codable, CaseIterable {
        /// The store charged the user (the purchase's own time, as the store gave it).
        case purchased
        /// The store's data was verified; the purchase is the user's.
        case verified
        /// A submission or purchase was refused (`purchase.rejected`); `reason` says why, `transactionId` and `productId`
        /// are what it claimed, when known (a refused submission's are kept apart from the purchases, for a retention).
        case rejected
        /// The purchase's items were granted (each item: `itemGranted`).
        case granted
        /// The app reported the purchase consumed.
        case consumed
        /// The purchase was finished with its store.
        case finished
        /// Paid but not completed by its deadline: flagged for refund (`refund.due`).
        case refundDue
        /// Refunded or revoked; `reason` is the store's when it gave one.
        case revoked
        /// An item given by a grant (`item`).
        case itemGranted
        /// An item taken back by a revocation; `item.shortfall` is what was spent already and could not be.
        case itemRevoked
        /// An item given back when the store reversed a refund.
        case itemRegranted
        /// An entitlement that came to this user when another user restored the purchase here.
        case itemTransferred
        /// The user's answer to sharing consumption data with the store (`consent`).
        case consentDecided
        /// An item an operator gave or took by hand (`adjustmentId`, `requestedBy`, `reason`; `item`), or gave back or took
        /// back by reversing an earlier adjustment.
        case adjusted
    }

    /// An item of the ledger: a currency amount (negative when taken) or an entitlement.
    public struct Item: Sendable, Hashable, Codable {
        public var kind: GrantItem.Kind
        public var code: String
        public var amount: Int64
        /// A revocation's amount that the user had spent already (not taken back); absent when none.
        public var shortfall: Int64?
        public var expiresAt: Date?

        public init(kind: GrantItem.Kind, code: String, amount: Int64, shortfall: Int64? = nil, expiresAt: Date? = nil) {
            self.kind = kind
            self.code = code
            self.amount = amount
            self.shortfall = shortfall
            self.expiresAt = expiresAt
        }
    }

    public struct Event: Sendable, Hashable, Codable {
        public var at: Date
        public var kind: Kind
        /// The purchase it is about (absent for a consent decision).
        public var store: Store?
        public var transactionId: TransactionID?
        public var productId: ProductID?
        public var app: AppID?
        public var reason: String?
        public var item: Item?
        /// The consent decision of `consentDecided`.
        public var consent: Bool?
        /// An adjustment's id and who asked for it.
        public var adjustmentId: AdjustmentID?
        public var requestedBy: String?

        public init(at: Date, kind: Kind, store: Store? = nil, transactionId: TransactionID? = nil, productId: ProductID? = nil, app: AppID? = nil,
                    reason: String? = nil, item: Item? = nil, consent: Bool? = nil, adjustmentId: AdjustmentID? = nil, requestedBy: String? = nil) {
            self.at = at
            self.kind = kind
            self.store = store
            self.transactionId = transactionId
            self.productId = productId
            self.app = app
            self.reason = reason
            self.item = item
            self.consent = consent
            self.adjustmentId = adjustmentId
            self.requestedBy = requestedBy
        }
    }

    public var userId: UserID
    /// Newest first.
    public var events: [Event]
    /// The cursor of the next (older) page; absent on the last.
    public var next: String?

    public init(userId: UserID, events: [Event], next: String?) {
        self.userId = userId
        self.events = events
        self.next = next
    }
}

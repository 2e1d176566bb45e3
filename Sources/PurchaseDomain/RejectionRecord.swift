import Foundation

/// A verdict refused (`purchase.rejected`), kept for its user's history (`UserHistory.Kind.rejected`) apart from the
/// purchases: it changes no purchase's lifecycle, so that a forged submission's claimed transaction id never stands in the
/// way of the real purchase of that id. Its ids are what the rejected submission claimed (or the store's, once
/// verified): untrusted text, shown as given, never a key.
public struct RejectionRecord: Sendable, Hashable {
    /// The rejected event's cause (`PurchaseRejectedEvent.causeID`: one per submission and transaction): with the user, the
    /// record's key, so that a redelivered message records nothing new.
    public var causeID: String
    public var userId: UserID
    public var store: Store
    public var transactionId: TransactionID?
    public var productId: ProductID?
    /// Why (`purchase.rejected`'s `reason`).
    public var reason: String
    public var rejectedAt: Date

    public init(causeID: String, userId: UserID, store: Store, transactionId: TransactionID? = nil, productId: ProductID? = nil, reason: String,
                rejectedAt: Date) {
        self.causeID = causeID
        self.userId = userId
        self.store = store
        self.transactionId = transactionId
        self.productId = productId
        self.reason = reason
        self.rejectedAt = rejectedAt
    }
}

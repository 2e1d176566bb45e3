import Foundation

/// What a consumption answer may say about a purchase, from the store's books.
public struct ConsumptionFacts: Sendable, Hashable {
    public var userId: UserID
    public var productType: ProductType
    public var state: PurchaseState
    /// Granted at some point (whatever happened since).
    public var delivered: Bool
    /// The app (or the store) reported it consumed.
    public var consumed: Bool

    public init(userId: UserID, productType: ProductType, state: PurchaseState, delivered: Bool, consumed: Bool) {
        self.userId = userId
        self.productType = productType
        self.state = state
        self.delivered = delivered
        self.consumed = consumed
    }
}

/// What became of one consumption request: `sending` while claimed, then `sent` or why not (`noConsent`, …).
public struct ConsumptionAnswer: Sendable, Hashable {
    public static let sending = "sending"
    public var outcome: String
    public var detail: String?
    public var answeredAt: Date?

    public init(outcome: String, detail: String?, answeredAt: Date?) {
        self.outcome = outcome
        self.detail = detail
        self.answeredAt = answeredAt
    }
}

public enum ConsumptionClaim: Sendable, Hashable {
    case claimed
    case answered(ConsumptionAnswer)
    case inProgress
}

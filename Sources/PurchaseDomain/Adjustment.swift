import Foundation

/// A correction of a user's books by hand: a support compensation, a goodwill grant, taking back what was given by
/// mistake — or the reversal of an earlier adjustment. Applied once per `id` (the operator's idempotency key), audited in
/// the ledger like a grant, with who asked for it and why.
public struct Adjustment: Sendable, Hashable {
    public var id: AdjustmentID
    public var userId: UserID
    /// Who asked for it (a support agent's name or id).
    public var requestedBy: String
    public var reason: String
    /// Currency amounts to give (positive) or take (negative), and entitlements to give (amount 1, until `expiresAt` if
    /// set). Empty for a reversal.
    public var items: [GrantItem]
    /// The adjustment this one undoes (its items, negated); nil for a new one.
    public var reverses: AdjustmentID?

    public init(id: AdjustmentID, userId: UserID, requestedBy: String, reason: String, items: [GrantItem], reverses: AdjustmentID? = nil) {
        self.id = id
        self.userId = userId
        self.requestedBy = requestedBy
        self.reason = reason
        self.items = items
        self.reverses = reverses
    }
}

/// What became of an adjustment.
public enum AdjustmentOutcome: Sendable, Hashable {
    /// Applied now: what it gave or took, the user's balances of the currencies it touched, and what a take found spent
    /// already (only when the deployment allows taking what is left).
    case applied(items: [GrantItem], balances: [ItemCode: Int64], shortfall: [ItemCode: Int64])
    /// Applied before under the same id (a repeated request): nothing changed. What it gave or took then, and the user's
    /// balances of those currencies now.
    case alreadyApplied(items: [GrantItem], balances: [ItemCode: Int64])
    /// Not applied, and why.
    case refused(AdjustmentRefusal, detail: String)
}

/// Why an adjustment was not applied.
public enum AdjustmentRefusal: String, Sendable, Hashable, Codable, CaseIterable {
    /// A take larger than the user's balance (unless the deployment allows taking what is left).
    case insufficientBalance
    /// The adjustment to reverse was never applied.
    case unknownAdjustment
    /// The adjustment to reverse was reversed already, or is itself a reversal.
    case notReversible
    /// The id was used before for another user or other items.
    case idReused
    /// An item no product of the catalog gives (a typo in a currency or entitlement name).
    case unknownItem
    /// Nothing to do, or an item that cannot be adjusted so (an entitlement taken: revoke the purchase that gave it).
    case invalidItems
    /// An amount beyond `CurrencyAmounts.itemLimit`, or a give that would take a balance past `CurrencyAmounts.balanceLimit`.
    case amountOutOfRange
}

/// The store side of adjustments.
public protocol AdjustmentRepository: Sendable {
    /// Applies `adjustment` in one transaction, once per id. A take beyond a balance is refused, unless
    /// `takeWhatIsLeft`: then it takes the balance and reports the rest as shortfall.
    func adjust(_ adjustment: Adjustment, takeWhatIsLeft: Bool, at now: Date) async throws -> AdjustmentOutcome
}

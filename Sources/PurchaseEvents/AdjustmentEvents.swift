import Foundation
import PurchaseDomain

/// `user.adjustment`: an operator's correction of a user's books (`iapctl adjust`, a support tool), applied once per
/// `adjustmentId` by the granter and answered with `user.adjusted`.
public struct UserAdjustment: PipelineEvent, Hashable {
    public static let type = EventType.userAdjustment

    /// An item to give or take: a currency amount (negative takes), or an entitlement to give (until `expiresAt`).
    public struct Item: Codable, Sendable, Hashable {
        public var kind: GrantItem.Kind
        public var code: ItemCode
        public var amount: Int64?
        public var expiresAt: Date?

        public init(kind: GrantItem.Kind, code: ItemCode, amount: Int64? = nil, expiresAt: Date? = nil) {
            self.kind = kind
            self.code = code
            self.amount = amount
            self.expiresAt = expiresAt
        }

        /// The grant item it asks for: an entitlement is given once (amount 1).
        public var grantItem: GrantItem { GrantItem(kind: kind, code: code, amount: kind == .entitlement ? 1 : amount ?? 0, expiresAt: expiresAt) }
    }

    public var adjustmentId: AdjustmentID
    public var userId: UserID
    public var requestedBy: String
    public var reason: String
    public var items: [Item]?
    public var reverses: AdjustmentID?
    public var requestedAt: Date

    public init(adjustmentId: AdjustmentID, userId: UserID, requestedBy: String, reason: String, items: [Item]? = nil, reverses: AdjustmentID? = nil,
                requestedAt: Date) {
        self.adjustmentId = adjustmentId
        self.userId = userId
        self.requestedBy = requestedBy
        self.reason = reason
        self.items = items
        self.reverses = reverses
        self.requestedAt = requestedAt
    }

    public var messageKey: Data? { Data(userId.rawValue.utf8) }
    public var eventID: String { "adjustment:\(adjustmentId)" }

    /// The domain's adjustment this event asks for.
    public var adjustment: Adjustment {
        Adjustment(id: adjustmentId, userId: userId, requestedBy: requestedBy, reason: reason, items: (items ?? []).map(\.grantItem), reverses: reverses)
    }
}

/// `user.adjusted`: what became of a `user.adjustment` — applied (each currency with the user's balance after), a repeat
/// that changed nothing, or refused with the reason.
public struct UserAdjusted: PipelineEvent, Hashable {
    public static let type = EventType.userAdjusted

    public enum Outcome: String, Codable, Sendable { case applied, alreadyApplied, refused }

    public struct Item: Codable, Sendable, Hashable {
        public var kind: GrantItem.Kind
        public var code: ItemCode
        public var amount: Int64
        public var expiresAt: Date?
        public var balance: Int64?
        public var shortfall: Int64?

        public init(kind: GrantItem.Kind, code: ItemCode, amount: Int64, expiresAt: Date? = nil, balance: Int64? = nil, shortfall: Int64? = nil) {
            self.kind = kind
            self.code = code
            self.amount = amount
            self.expiresAt = expiresAt
            self.balance = balance
            self.shortfall = shortfall
        }
    }

    public var adjustmentId: AdjustmentID
    public var userId: UserID
    public var requestedBy: String
    public var reason: String
    public var outcome: Outcome
    public var refusal: AdjustmentRefusal?
    public var detail: String?
    public var items: [Item]
    public var reverses: AdjustmentID?
    public var adjustedAt: Date

    public init(_ request: UserAdjustment, outcome: AdjustmentOutcome, at now: Date) {
        adjustmentId = request.adjustmentId
        userId = request.userId
        requestedBy = request.requestedBy
        reason = request.reason
        reverses = request.reverses
        adjustedAt = now
        func answered(_ applied: [GrantItem], _ balances: [ItemCode: Int64], _ shortfall: [ItemCode: Int64]) -> [Item] {
            applied.map { item in
                Item(kind: item.kind, code: item.code, amount: item.amount, expiresAt: item.expiresAt,
                     balance: item.kind == .currency ? balances[item.code] ?? 0 : nil, shortfall: item.kind == .currency ? shortfall[item.code] : nil)
            }
        }
        switch outcome {
        case .applied(let applied, let balances, let shortfall):
            self.outcome = .applied
            items = answered(applied, balances, shortfall)
        case .alreadyApplied(let applied, let balances):
            // What it gave or took when applied (a take as taken), with the balances now.
            self.outcome = .alreadyApplied
            items = answered(applied, balances, [:])
        case .refused(let refusal, let detail):
            self.outcome = .refused
            self.refusal = refusal
            self.detail = String(detail.prefix(2000))
            items = []
        }
    }

    public var messageKey: Data? { Data(userId.rawValue.utf8) }
    /// A refusal's id names its time: the same id may be applied later (refused, it left no trace), and that answer must
    /// not share the refusal's `ce_id`.
    public var eventID: String {
        outcome == .refused ? "adjusted:\(adjustmentId):refused:\(EpochMilliseconds.milliseconds(adjustedAt))" : "adjusted:\(adjustmentId)"
    }
}

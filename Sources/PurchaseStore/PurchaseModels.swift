import Foundation

/// Where a purchase is in its life. `verified → granted → finished`; `rejected`, `refund_due` and
/// `revoked` end it otherwise.
public enum PurchaseState: String, Sendable, Codable, CaseIterable {
    case verified, granted, finished, rejected
    case refundDue = "refund_due"
    case revoked
}

/// Effects are keyed by store and transaction id.
public struct PurchaseKey: Hashable, Sendable, CustomStringConvertible {
    public var store: String
    public var transactionId: String
    public init(store: String, transactionId: String) {
        self.store = store
        self.transactionId = transactionId
    }
    public var description: String { "\(store):\(transactionId)" }
}

/// A purchase as the store keeps it.
public struct PurchaseRecord: Sendable, Hashable {
    public var key: PurchaseKey
    public var userId: String
    public var productId: String
    public var quantity: Int
    public var purchaseTime: Date
    public var state: PurchaseState
    public var environment: String?
    /// AppCoins: the package and token to ask the store API again with.
    public var packageName: String?
    public var purchaseToken: String?
    /// The store reported the purchase consumed by the app (AppCoins `consumptionState` 1).
    public var storeConsumed: Bool

    public init(key: PurchaseKey, userId: String, productId: String, quantity: Int, purchaseTime: Date,
                state: PurchaseState = .verified, environment: String? = nil, packageName: String? = nil,
                purchaseToken: String? = nil, storeConsumed: Bool = false) {
        self.packageName = packageName
        self.purchaseToken = purchaseToken
        self.storeConsumed = storeConsumed
        self.key = key
        self.userId = userId
        self.productId = productId
        self.quantity = quantity
        self.purchaseTime = purchaseTime
        self.state = state
        self.environment = environment
    }
}

/// One thing a grant gives: an amount of a currency, or an entitlement (until `expiresAt`, if set).
public struct GrantItem: Sendable, Hashable, Codable {
    public enum Kind: String, Sendable, Codable { case currency, entitlement }
    public var kind: Kind
    public var code: String
    public var amount: Int64
    public var expiresAt: Date?

    public static func currency(_ code: String, _ amount: Int64) -> GrantItem { GrantItem(kind: .currency, code: code, amount: amount) }
    public static func entitlement(_ code: String, until expiresAt: Date? = nil) -> GrantItem {
        GrantItem(kind: .entitlement, code: code, amount: 1, expiresAt: expiresAt)
    }

    public init(kind: Kind, code: String, amount: Int64, expiresAt: Date? = nil) {
        self.kind = kind
        self.code = code
        self.amount = amount
        self.expiresAt = expiresAt
    }
}

public enum RecordOutcome: Sendable, Hashable {
    case recorded
    /// Already known: its current state and the user it was first recorded for.
    case existing(state: PurchaseState, userId: String)
}

public enum GrantOutcome: Sendable, Hashable {
    case granted(ledgerEntryIds: [Int64])
    /// Granted before: nothing changed. The items are those of the original grant.
    case alreadyGranted(items: [GrantItem])
    /// Not in a state that may be granted (e.g. revoked, refund_due), or unknown.
    case notGrantable(state: PurchaseState?)
}

public enum FinishOutcome: Sendable, Hashable {
    case finished
    case alreadyFinished
    /// Never finish what was not granted.
    case notGranted(state: PurchaseState?)
}

public enum RevokeOutcome: Sendable, Hashable {
    /// Grants reversed; `shortfall` per currency is what could not be taken back (spent already).
    case revoked(shortfall: [String: Int64])
    case alreadyRevoked
    case unknownPurchase
}

/// A purchase the sweeper flagged: paid, not completed by its deadline.
public struct DuePurchase: Sendable, Hashable {
    public var record: PurchaseRecord
    /// `verified` or `granted` before it was flagged.
    public var previousState: PurchaseState
    public var deadline: Date
}

/// Figures for metrics and the demo's books.
public struct StoreStatistics: Sendable, Hashable {
    public var purchasesByState: [PurchaseState: Int]
    public var oldestUnfinishedPurchase: Date?
}

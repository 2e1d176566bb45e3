import Foundation

extension UserID {
    /// The owner of a charge nobody claimed yet (`unclaimed`): the empty id, which no producer can send.
    public static let nobody: UserID = ""
}

/// A purchase as the store keeps it.
public struct PurchaseRecord: Sendable, Hashable {
    /// The user who owns it; nil while nobody has claimed it (`UserID.nobody`, an unclaimed charge).
    public var owner: UserID? { userId == .nobody ? nil : userId }

    public var key: PurchaseKey
    public var userId: UserID
    public var productId: ProductID
    /// What was bought: from the store where it says so, else from the catalog; `unknown` for rows recorded before
    /// types were kept whose product the catalog does not name.
    public var productType: ProductType
    public var quantity: Int
    public var purchaseTime: Date
    public var state: PurchaseState
    public var environment: String?
    /// The subscription (or restored purchase) this transaction belongs to; renewals share it.
    public var originalTransactionId: TransactionID?
    /// AppCoins and Google Play: the package and token to ask the store API again with (and, on Google Play, to consume or acknowledge with).
    public var packageName: PackageName?
    public var purchaseToken: PurchaseToken?
    /// The store reported the purchase completed when it was verified: consumed by the app (AppCoins and Google Play
    /// `consumptionState` 1), or a Google Play subscription period acknowledged already (a renewal): nothing is left to
    /// call the store for.
    public var storeConsumed: Bool
    /// The end of the period a subscription's transaction paid for, as verified (nil for other products, and for
    /// purchases recorded before it was kept).
    public var expiresDate: Date?
    /// The account the store's signed transaction binds it to (App Store `appAccountToken`); nil for receipts, which
    /// carry none, and for purchases recorded before it was kept.
    public var appAccountToken: AccountToken?
    /// The deployment's app it was bought in (`AppDirectory`); nil for the primary app of a deployment that names none, and
    /// for purchases recorded before apps were named (they belong to the primary app).
    public var app: AppID?

    public init(key: PurchaseKey, userId: UserID, productId: ProductID, productType: ProductType = .unknown, quantity: Int, purchaseTime: Date,
                state: PurchaseState = .verified, environment: String? = nil, originalTransactionId: TransactionID? = nil, packageName: PackageName? = nil,
                purchaseToken: PurchaseToken? = nil, storeConsumed: Bool = false, expiresDate: Date? = nil, appAccountToken: AccountToken? = nil,
                app: AppID? = nil) {
        self.app = app
        self.appAccountToken = appAccountToken
        self.productType = productType
        self.expiresDate = expiresDate
        self.originalTransactionId = originalTransactionId
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
    public var code: ItemCode
    public var amount: Int64
    public var expiresAt: Date?

    public static func currency(_ code: ItemCode, _ amount: Int64) -> GrantItem { GrantItem(kind: .currency, code: code, amount: amount) }
    public static func entitlement(_ code: ItemCode, until expiresAt: Date? = nil) -> GrantItem {
        GrantItem(kind: .entitlement, code: code, amount: 1, expiresAt: expiresAt)
    }

    public init(kind: Kind, code: ItemCode, amount: Int64, expiresAt: Date? = nil) {
        self.kind = kind
        self.code = code
        self.amount = amount
        self.expiresAt = expiresAt
    }

    /// An expiring entitlement lasting until `date` when that is later than its expiry (a subscription period the store
    /// extended); anything else as it is.
    public func lasting(until date: Date) -> GrantItem {
        guard kind == .entitlement, let expiresAt, expiresAt < date else { return self }
        return GrantItem(kind: kind, code: code, amount: amount, expiresAt: date)
    }

    /// An expiring entitlement ending by `date` when it would last longer (a subscription period another product of the
    /// subscription replaced then); anything else as it is.
    public func ending(by date: Date) -> GrantItem {
        guard kind == .entitlement, let expiresAt, expiresAt > date else { return self }
        return GrantItem(kind: kind, code: code, amount: amount, expiresAt: date)
    }
}

public enum RecordOutcome: Sendable, Hashable {
    /// Recorded now; or, for a submission of a charge the store announced first (`unclaimed`), claimed for its user now.
    case recorded
    /// The store refunded or revoked it before the pipeline saw it: recorded `revoked`, never to be granted.
    case revokedEarlier
    /// Already known: its current state and the user it was first recorded for. Only its refund known (a refused
    /// verification of a purchase refunded first): `revokedUnseen`, with the submitter, as nothing names an owner yet.
    case existing(state: PurchaseState, userId: UserID)
}

public enum GrantOutcome: Sendable, Hashable {
    /// `balances`: the user's balance of each currency the grant added to, after it. `endsBy`: a subscription period
    /// another product of the subscription replaced before it was granted (an upgrade) ends then, before its own expiry.
    /// `ended`: the subscription's earlier periods this one (an upgrade) ended at its start.
    case granted(ledgerEntryIds: [Int64], balances: [ItemCode: Int64], endsBy: Date? = nil, ended: [EndedPeriod] = [])
    /// Granted before: nothing changed. The items are those of the original grant, `balances` the user's balance of
    /// their currencies now, `ended` what the grant answered as `ended` (the periods an upgrade ended).
    case alreadyGranted(items: [GrantItem], balances: [ItemCode: Int64], ended: [EndedPeriod] = [])
    /// Not in a state that may be granted (e.g. revoked, refund_due), or unknown.
    case notGrantable(state: PurchaseState?)
}

/// A subscription period that a period of another product of its subscription (an upgrade) ended at that one's start,
/// before its own expiry, as the App Store does: what its holder is told.
public struct EndedPeriod: Sendable, Hashable {
    public let key: PurchaseKey
    /// Who holds what it gives: its buyer, or the user a restore moved it to.
    public let userId: UserID
    public let productId: ProductID
    public let quantity: Int
    /// The upgrade's start.
    public let endedAt: Date
    /// The entitlements it gives, ending at `endedAt`.
    public let items: [GrantItem]

    public init(key: PurchaseKey, userId: UserID, productId: ProductID, quantity: Int, endedAt: Date, items: [GrantItem]) {
        self.key = key
        self.userId = userId
        self.productId = productId
        self.quantity = quantity
        self.endedAt = endedAt
        self.items = items
    }
}

public enum FinishOutcome: Sendable, Hashable {
    case finished
    case alreadyFinished
    /// Never finish what was not granted.
    case notGranted(state: PurchaseState?)
}

public enum RevokeOutcome: Sendable, Hashable {
    /// Grants reversed; `shortfall` per currency is what could not be taken back (spent already).
    case revoked(shortfall: [ItemCode: Int64])
    case alreadyRevoked
    /// Not seen yet: a tombstone is recorded, so that the purchase is refused when it arrives.
    case recordedBeforePurchase
    /// Nothing to take back in this state (e.g. a purchase verification rejected).
    case notRevocable(state: PurchaseState)
    /// The store decided otherwise later (its refund reversed), and that decision came first: nothing changes.
    case outdated
}

public enum ReinstateOutcome: Sendable, Hashable {
    /// The refund was reversed: what it took back, `items`, is given back and the purchase is finished. `ended`: as for a
    /// grant (`GrantOutcome.granted`), the subscription's earlier periods this one, an upgrade, ended at its start.
    case reinstated(items: [GrantItem], ledgerEntryIds: [Int64], balances: [ItemCode: Int64], ended: [EndedPeriod] = [])
    /// The tombstone of a purchase not seen yet is cleared: it is granted as usual when it arrives.
    case tombstoneCleared
    /// Revoked before its grant, with nothing to give or nobody to give it to: back in `to` (`verified`, `unclaimed`),
    /// where its refund found it; nothing is given, and nothing finished.
    case returned(to: PurchaseState)
    /// Not revoked (never, or reinstated already): nothing changes. The reversal is remembered: its refund, if it comes
    /// later, is `outdated`.
    case notRevoked(state: PurchaseState)
    /// The store refunded it again since (that refund came first): nothing changes.
    case outdated
}

public enum TransferOutcome: Sendable, Hashable {
    /// The purchase (and the entitlements it gives, `items`) moved from `from` to the restoring user.
    case transferred(from: UserID, items: [GrantItem])
    /// The restoring user owns it already: nothing changes.
    case alreadyOwned
    /// It stays with `owner`, for the lifecycle's `reason`: a consumable, the `keep` policy, or a purchase no longer in force.
    case refused(owner: UserID, reason: RefusalReason)
}

public enum ExpireOutcome: Sendable, Hashable {
    /// What the expired period gave ended now.
    case ended(entitlements: [ItemCode])
    /// Nothing to end: unknown, not a subscription, not granted, or ended already.
    case nothingToEnd(state: PurchaseState)
}

/// What RENEWAL_EXTENDED did to a subscription period.
public enum ExtendOutcome: Sendable, Hashable {
    /// Its expiry moved later (now, or by the same extension before), `until` then (the date asked for, or the start of
    /// the period that replaced it, if earlier); these active entitlements with it.
    case extended(entitlements: [ItemCode], until: Date)
    /// Nothing in force moved: unknown, not a granted subscription period, ended, an older date; or revoked (the date is
    /// recorded for its refund's reversal).
    case unchanged(state: PurchaseState)
}

/// A purchase the sweeper flagged: paid, not completed by its deadline.
public struct DuePurchase: Sendable, Hashable {
    public var record: PurchaseRecord
    /// `verified` or `granted` before it was flagged.
    public var previousState: PurchaseState
    public var deadline: Date

    public init(record: PurchaseRecord, previousState: PurchaseState, deadline: Date) {
        self.record = record
        self.previousState = previousState
        self.deadline = deadline
    }
}

/// What a user owns now, as an app asks it: balances, entitlements in force, purchases granted but not finished, and the
/// statuses of their subscriptions.
public struct UserHoldings: Sendable, Hashable, Codable {
    public struct Entitlement: Sendable, Hashable, Codable {
        public var entitlement: ItemCode
        public var productId: ProductID?
        /// Nil: for good.
        public var expiresAt: Date?

        public init(entitlement: ItemCode, productId: ProductID?, expiresAt: Date?) {
            self.entitlement = entitlement
            self.productId = productId
            self.expiresAt = expiresAt
        }

        enum CodingKeys: String, CodingKey { case entitlement, productId, expiresAt }

        /// `expiresAt` is written as null rather than left out: "for good" is an answer.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(entitlement, forKey: .entitlement)
            try container.encodeIfPresent(productId, forKey: .productId)
            try container.encode(expiresAt, forKey: .expiresAt)
        }
    }

    public struct Pending: Sendable, Hashable, Codable {
        public var store: Store
        public var transactionId: TransactionID
        public var productId: ProductID
        public var productType: ProductType
        public var purchasedAt: Date
        /// The deployment's app it was bought in (absent: the primary app).
        public var app: AppID?

        public init(store: Store, transactionId: TransactionID, productId: ProductID, productType: ProductType, purchasedAt: Date, app: AppID? = nil) {
            self.app = app
            self.store = store
            self.transactionId = transactionId
            self.productId = productId
            self.productType = productType
            self.purchasedAt = purchasedAt
        }
    }

    public var userId: UserID
    public var balances: [ItemCode: Int64]
    public var entitlements: [Entitlement]
    public var pending: [Pending]
    /// The statuses of the subscriptions the user owns (`SubscriptionStatusRepository.subscriptionStatuses(of:)`).
    public var subscriptions: [SubscriptionStatus]

    public init(userId: UserID, balances: [ItemCode: Int64], entitlements: [Entitlement], pending: [Pending], subscriptions: [SubscriptionStatus] = []) {
        self.userId = userId
        self.balances = balances
        self.entitlements = entitlements
        self.pending = pending
        self.subscriptions = subscriptions
    }
}

/// Where the app's consumption report was recorded (`SQLPurchaseStore.recordConsumed`).
public enum ConsumptionReport: Sendable, Equatable {
    /// With the purchase's record (or one reported before it stands).
    case withItsPurchase
    /// The purchase is not recorded yet: its record will take the report.
    case beforeItsPurchase
}

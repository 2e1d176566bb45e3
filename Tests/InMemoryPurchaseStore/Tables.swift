import Foundation
import PurchaseDomain

/// What the in-memory store keeps, table by table as `SQLPurchaseStore` keeps it, so that each decision can be carried
/// out as the SQL store carries it out. Times are kept as the SQL store keeps them: whole milliseconds since 1970.
struct Tables: Sendable {
    var purchases: [PurchaseKey: PurchaseRow] = [:]
    /// How many purchases were ever recorded: each row's place in the order they were (`PurchaseRow.recorded`).
    var recordedCount: Int64 = 0
    /// In the order the entries were written: their ids increase.
    var ledger: [LedgerEntry] = []
    var nextLedgerId: Int64 = 1
    /// Per user, per currency code (by its bytes, as the database keys it).
    var balances: [UserID: [ItemCode: Int64]] = [:]
    /// One row per holder, entitlement and purchase that gives it.
    var entitlements: [EntitlementKey: EntitlementRow] = [:]
    /// Refunds of purchases not recorded yet.
    var tombstones: [PurchaseKey: Tombstone] = [:]
    /// The store's latest refund decision about each purchase.
    var refundDecisions: [PurchaseKey: Int64] = [:]
    /// The app's consumption reports that came before their purchase was recorded.
    var earlyConsumption: [PurchaseKey: Int64] = [:]
    var consents: [UserID: Consent] = [:]
    var consumptionAnswers: [NotificationID: ConsumptionAnswerRow] = [:]
    /// The store notifications handled, with when (milliseconds).
    var notificationsSeen: [NotificationID: Int64] = [:]
    var checkpoints: [String: Checkpoint] = [:]
    /// The store's latest word on each subscription, by its original transaction (`PurchaseKey` of the original).
    var subscriptionStatuses: [PurchaseKey: SubscriptionStatus] = [:]
    /// Registered account tokens (`user.token`) by their folded spelling.
    var accountTokens: [AccountToken: UserID] = [:]
    /// What each stored status's announcement named.
    var subscriptionAnnouncements: [PurchaseKey: [SubscriptionStatus.Field]] = [:]
    /// The rejections kept for the users' histories, by user and cause, in the order they were kept.
    var rejections: [RejectionRecord] = []
}

/// How far a reconciliation pass read a history, and who holds it until when (milliseconds).
struct Checkpoint: Sendable {
    var position: Int64?
    var leaseOwner: String?
    var leaseUntil: Int64
    /// Until when its store API asked not to be called (`holdCheckpoint`).
    var notBefore: Int64? = nil
}

/// A purchase's record, with the columns of its row that are not part of `PurchaseRecord`.
struct PurchaseRow: Sendable {
    /// Its state, owner and recorded expiry are kept current; its times are whole milliseconds.
    var record: PurchaseRecord
    /// Its place in the order purchases were recorded: of purchases at the same time, the SQL store's queries that order by
    /// time alone answer them in that order (SQLite's rowid, PostgreSQL's heap), and tests rely on it.
    let recorded: Int64
    var grantedAt: Int64?
    var finishedAt: Int64?
    var consumedAt: Int64?
    var refundNotifiedAt: Int64?

    var key: PurchaseKey { record.key }
    var state: PurchaseState { record.state }
    var purchaseTime: Int64 { record.purchaseTime.milliseconds }
    /// The subscription (or restored purchase) it belongs to: its original transaction, else itself.
    var original: TransactionID { record.originalTransactionId ?? record.key.transactionId }
    var knownConsumed: Bool { consumedAt != nil || record.storeConsumed }
}

struct LedgerEntry: Sendable {
    enum Kind: String, Sendable { case grant, regrant, revoke, transfer }
    let id: Int64
    let key: PurchaseKey
    let kind: Kind
    let userId: UserID
    let itemKind: GrantItem.Kind
    let code: ItemCode
    let amount: Int64
    /// A revocation's: what the balance could not give back.
    let shortfall: Int64
    let expiresAt: Int64?
    let createdAt: Int64
}

struct EntitlementKey: Hashable, Sendable {
    let user: UserID
    let code: ItemCode
    let key: PurchaseKey
}

struct EntitlementRow: Sendable {
    var expiresAt: Int64?
    var active: Bool
}

struct Tombstone: Sendable {
    var reason: String
    var revokedAt: Int64
    var reversedAt: Int64?
}

struct Consent: Sendable {
    var consumptionData: Bool
    var decidedAt: Int64
}

struct ConsumptionAnswerRow: Sendable {
    let key: PurchaseKey
    var outcome: String
    var detail: String?
    var claimedAt: Int64
    var answeredAt: Int64?
}

/// A purchase as its lifecycle sees it: its state, owner (nil without a record) and product type.
struct CurrentPurchase: Sendable {
    var state: PurchaseState
    var userId: UserID?
    var type: ProductType
}

extension Date {
    /// The date as the SQL store keeps it.
    var milliseconds: Int64 { EpochMilliseconds.milliseconds(self) }

    /// The date the SQL store reads back: whole milliseconds.
    var storedPrecision: Date { Date(milliseconds: milliseconds) }

    init(milliseconds: Int64) { self.init(timeIntervalSince1970: Double(milliseconds) / 1000) }
}

extension Tables {
    /// Where a purchase is in its lifecycle: its record's state, else `revokedUnseen` for a tombstone, else `unseen`.
    func current(_ key: PurchaseKey) -> CurrentPurchase {
        if let row = purchases[key] { return CurrentPurchase(state: row.state, userId: row.record.userId, type: row.record.productType) }
        let refundedFirst = tombstones[key].map { $0.reversedAt == nil } ?? false
        return CurrentPurchase(state: refundedFirst ? .revokedUnseen : .unseen, userId: nil, type: .unknown)
    }

    /// The purchase as it is and what the lifecycle says `event` does to it; `type` overrides the recorded type (a
    /// purchase being recorded has none).
    func decide(_ key: PurchaseKey, on event: LifecycleEvent, type: ProductType? = nil) -> (CurrentPurchase, Transition) {
        let current = current(key)
        return (current, Lifecycle.transition(from: current.state, on: event, type: type ?? current.type))
    }

    /// Records `purchase` in `state` (nothing if it is recorded: the caller decided), taking the consumption report kept
    /// for it, if any.
    mutating func insert(_ purchase: PurchaseRecord, state: PurchaseState) {
        guard purchases[purchase.key] == nil else { return }
        var record = purchase
        record.state = state
        record.purchaseTime = purchase.purchaseTime.storedPrecision
        record.expiresDate = purchase.expiresDate?.storedPrecision
        recordedCount += 1
        purchases[purchase.key] = PurchaseRow(record: record, recorded: recordedCount, consumedAt: earlyConsumption[purchase.key])
    }

    /// The purchases of `store` whose original transaction is `original` (the one of that id among them).
    func periods(_ store: Store, original: TransactionID) -> [PurchaseRow] {
        purchases.values.filter { $0.key.store == store && ($0.key.transactionId == original || $0.record.originalTransactionId == original) }
    }

    @discardableResult
    mutating func writeLedger(_ key: PurchaseKey, _ kind: LedgerEntry.Kind, user: UserID, _ itemKind: GrantItem.Kind, code: ItemCode, amount: Int64,
                              shortfall: Int64 = 0, expiresAt: Int64?, at now: Date) -> Int64 {
        let id = nextLedgerId
        nextLedgerId += 1
        ledger.append(LedgerEntry(id: id, key: key, kind: kind, userId: user, itemKind: itemKind, code: code, amount: amount, shortfall: shortfall,
                                  expiresAt: expiresAt, createdAt: now.milliseconds))
        return id
    }

    /// Ledger entries of kind `entry` (`grant` or `regrant`) for `items`, and the balances and entitlements they give:
    /// the ids, and the user's balance of each currency added to, after it.
    mutating func apply(_ items: [GrantItem], entry: LedgerEntry.Kind, _ key: PurchaseKey, userId: UserID,
                        at now: Date) -> (ledgerEntryIds: [Int64], balances: [ItemCode: Int64]) {
        var applied: (ledgerEntryIds: [Int64], balances: [ItemCode: Int64]) = ([], [:])
        for item in items {
            applied.ledgerEntryIds.append(writeLedger(key, entry, user: userId, item.kind, code: item.code, amount: item.amount,
                                                      expiresAt: item.expiresAt?.milliseconds, at: now))
            switch item.kind {
            case .currency:
                let balance = balances[userId, default: [:]][item.code, default: 0] + item.amount
                balances[userId, default: [:]][item.code] = balance
                applied.balances[item.code] = balance
            case .entitlement:
                giveEntitlement(item, to: userId, from: key)
            }
        }
        return applied
    }

    /// `userId` holds `item`'s entitlement through the purchase `key`, beside what other purchases give of it.
    mutating func giveEntitlement(_ item: GrantItem, to userId: UserID, from key: PurchaseKey) {
        entitlements[EntitlementKey(user: userId, code: item.code, key: key)] = EntitlementRow(expiresAt: item.expiresAt?.milliseconds, active: true)
    }

    /// What a purchase grants now per item: its grants and re-grants less what was taken back (in full: a shortfall is
    /// what the user had spent, not what the purchase still gives), each entitlement until its current expiry.
    func heldItems(_ key: PurchaseKey) -> [GrantItem] {
        let entries = ledger.filter { $0.key == key && [.grant, .regrant, .revoke].contains($0.kind) }
        let items = Self.summed(entries, amount: \.amount, expiry: { group in group.compactMap(\.expiresAt).max() }).filter { $0.amount > 0 }
        return withCurrentExpiry(items, key)
    }

    /// `key`'s ledger entries of `kind`, as written.
    func ledgerItems(_ key: PurchaseKey, kind: LedgerEntry.Kind) -> [GrantItem] {
        ledger.filter { $0.key == key && $0.kind == kind }.map { entry in
            GrantItem(kind: entry.itemKind, code: entry.code, amount: entry.amount, expiresAt: entry.expiresAt.map(Date.init(milliseconds:)))
        }
    }

    /// `entries` summed per item (kind, then code, in byte order, as the database orders them), each with `expiry` of its group.
    static func summed(_ entries: [LedgerEntry], amount: (LedgerEntry) -> Int64, expiry: ([LedgerEntry]) -> Int64?) -> [GrantItem] {
        struct Item: Hashable { let kind: GrantItem.Kind, code: ItemCode }
        let groups = Dictionary(grouping: entries) { Item(kind: $0.itemKind, code: $0.code) }
        return groups.sorted { left, right in
            bytesPrecede([left.key.kind.rawValue, left.key.code.rawValue], [right.key.kind.rawValue, right.key.code.rawValue])
        }.map { item, group in
            GrantItem(kind: item.kind, code: item.code, amount: group.reduce(0) { $0 + amount($1) }, expiresAt: expiry(group).map(Date.init(milliseconds:)))
        }
    }
}

/// Whether `left` comes first in byte order, text by text (as SQLite's `BINARY` and PostgreSQL's `C` collation order text).
func bytesPrecede(_ left: [String], _ right: [String]) -> Bool {
    for (mine, theirs) in zip(left, right) where !mine.utf8.elementsEqual(theirs.utf8) {
        return mine.utf8.lexicographicallyPrecedes(theirs.utf8)
    }
    return left.count < right.count
}

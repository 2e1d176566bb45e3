import Database
import Foundation
import PurchaseDomain

/// The store's books, read in one pass: what each purchase was granted and where the books disagree
/// with themselves. For reconciliation by an operator and for the chaos run's invariants.
public struct StoreAudit: Sendable {
    public struct Purchase: Sendable {
        public var state: PurchaseState
        public var productType: ProductType
        /// Grant entries in the ledger (one per item granted).
        public var grantEntries: Int
        public var grantedAt: Date?
        public var finishedAt: Date?
        /// The app it was bought in (nil: the primary app).
        public var app: AppID?
    }

    /// Every purchase (when the audit was asked for them).
    public var purchases: [PurchaseKey: Purchase] = [:]
    /// Purchases by state.
    public var purchaseCounts: [PurchaseState: Int] = [:]
    /// Ledger grant entries of purchases the store has no record of (must be empty).
    public var orphanGrants: [PurchaseKey] = []
    /// Ledger entries of adjustments the store has no record of (must be empty).
    public var orphanAdjustmentEntries: [String] = []
    /// Users whose currency balance is not the sum of their ledger entries (grants less revocations).
    public var balanceMismatches: [String] = []
    /// Purchases finished without a grant in the ledger, or finished before they were granted.
    public var finishedWithoutGrant: [PurchaseKey] = []
    /// Σ balances by currency.
    public var currencyTotals: [ItemCode: Int64] = [:]

    /// Whether the books agree with themselves: no entry without its purchase or adjustment, every balance the sum of its
    /// entries, nothing finished without its grant.
    public var isBalanced: Bool {
        orphanGrants.isEmpty && orphanAdjustmentEntries.isEmpty && balanceMismatches.isEmpty && finishedWithoutGrant.isEmpty
    }
}

extension SQLPurchaseStore {
    /// Reads the whole store; meant for audits and tests, not for the hot path.
    /// - Parameter listingPurchases: false: only `purchaseCounts`, not every purchase (`purchases` stays empty).
    public func audit(listingPurchases: Bool = true) async throws -> StoreAudit {
        try await executor.run { connection in
            var audit = StoreAudit()
            for row in try connection.query("SELECT state, count(*) FROM purchases GROUP BY state") {
                if let state = row[0].string.flatMap(PurchaseState.init(rawValue:)), let count = row[1].int64 { audit.purchaseCounts[state] = Int(count) }
            }
            if listingPurchases {
                for row in try connection.query("""
                    SELECT p.store, p.transaction_id, p.state, (SELECT count(*) FROM ledger l
                        WHERE l.store = p.store AND l.transaction_id = p.transaction_id AND l.entry_kind = 'grant'), p.granted_at, p.finished_at, p.product_type, p.app
                    FROM purchases p
                    """) {
                    guard let store = row[0].string.flatMap(Store.init(rawValue:)), let id = row[1].identifier(TransactionID.self), let state = row[2].string.flatMap(PurchaseState.init(rawValue:)),
                          let entries = row[3].int64 else { continue }
                    audit.purchases[PurchaseKey(store: store, transactionId: id)] = StoreAudit.Purchase(
                        state: state, productType: row[6].string.flatMap(ProductType.init(rawValue:)) ?? .unknown, grantEntries: Int(entries), grantedAt: row[4].int64.map(PurchaseTime.date), finishedAt: row[5].int64.map(PurchaseTime.date),
                        app: row[7].identifier())
                }
            }
            audit.orphanGrants = try connection.query("""
                SELECT DISTINCT l.store, l.transaction_id FROM ledger l
                WHERE l.store <> $1 AND NOT EXISTS (SELECT 1 FROM purchases p WHERE p.store = l.store AND p.transaction_id = l.transaction_id)
                """, [.text(Self.adjustmentSource)]).compactMap(Self.key)
            audit.orphanAdjustmentEntries = try connection.query("""
                SELECT DISTINCT l.transaction_id FROM ledger l
                WHERE l.store = $1 AND NOT EXISTS (SELECT 1 FROM adjustments a WHERE a.adjustment_id = l.transaction_id)
                """, [.text(Self.adjustmentSource)]).compactMap { $0[0].string }
            // A revocation's entry is -amount, and its shortfall what the balance could not give back.
            for row in try connection.query("""
                SELECT coalesce(b.user_id, s.user_id), coalesce(b.currency, s.code), coalesce(b.amount, 0), coalesce(s.total, 0)
                FROM balances b FULL OUTER JOIN (
                    SELECT user_id, code, sum(amount + shortfall) AS total
                    FROM ledger WHERE item_kind = 'currency' GROUP BY user_id, code
                ) s ON s.user_id = b.user_id AND s.code = b.currency
                WHERE coalesce(b.amount, 0) <> coalesce(s.total, 0)
                """) {
                audit.balanceMismatches.append("\(row[0].string ?? "?") \(row[1].string ?? "?"): balance \(row[2].int64 ?? 0), ledger \(row[3].int64 ?? 0)")
            }
            audit.finishedWithoutGrant = try connection.query("""
                SELECT p.store, p.transaction_id FROM purchases p
                WHERE p.finished_at IS NOT NULL AND (p.granted_at IS NULL OR p.finished_at < p.granted_at OR NOT EXISTS (
                    SELECT 1 FROM ledger l WHERE l.store = p.store AND l.transaction_id = p.transaction_id AND l.entry_kind IN ('grant', 'regrant')))
                """).compactMap(Self.key)
            for row in try connection.query("SELECT currency, sum(amount) FROM balances GROUP BY currency") {
                if let currency = row[0].identifier(ItemCode.self), let total = row[1].int64 { audit.currencyTotals[currency] = total }
            }
            return audit
        }
    }

    private static func key(_ row: [SQLValue]) -> PurchaseKey? {
        guard let store = row[0].string.flatMap(Store.init(rawValue:)), let id = row[1].identifier(TransactionID.self) else { return nil }
        return PurchaseKey(store: store, transactionId: id)
    }
}

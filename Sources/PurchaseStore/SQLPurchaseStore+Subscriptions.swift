import Database
import Foundation
import PurchaseDomain

/// Subscription periods: the store ends them (EXPIRED, GRACE_PERIOD_EXPIRED) and moves their renewal date
/// (RENEWAL_EXTENDED). The grant's ledger entry keeps the expiry the period was granted with; an extension is
/// recorded with the purchase (`purchases.expires_at`), and what the purchase holds is judged with the later of the two.
/// A period of another product of the same subscription that begins before a period ends (an upgrade, which the App Store
/// makes take effect at once, refunding the rest of the old period) ends the old period then (`supersededAt`): at the
/// later period's grant, or at the old period's own when that comes after it.
extension SQLPurchaseStore {
    /// A subscription period ended (EXPIRED, GRACE_PERIOD_EXPIRED, naming the transaction that paid for it): the
    /// entitlements that transaction and the subscription's earlier periods give end now (or at their own expiry, if
    /// earlier). Not a later period's: an expiry can arrive late, after the user subscribed again and paid for more.
    public func expireSubscription(_ key: PurchaseKey, at now: Date) async throws -> ExpireOutcome {
        let dialect = dialect
        return try await decide(key, on: .expire) { _, connection, current, transition in
            let store = SQLValue.text(key.store.rawValue)
            guard transition.effects.contains(.endEntitlement), let named = try connection.query("""
                      SELECT coalesce(original_transaction_id, transaction_id), purchase_time FROM purchases WHERE store = $1 AND transaction_id = $2
                      """, [store, .text(key.transactionId)]).first,
                  let original = named[0].string, let time = named[1].int64 else { return .nothingToEnd(state: current.state) }
            var ended: Set<ItemCode> = []
            // Latest first (it first), locked on PostgreSQL in that order: every expiry locks the periods it ends in one order.
            for row in try connection.query("""
                SELECT transaction_id, state, product_type FROM purchases WHERE store = $1 AND \(Self.ofOriginalCondition) AND purchase_time <= $3
                ORDER BY purchase_time DESC, transaction_id DESC\(dialect == .postgres ? " FOR UPDATE" : "")
                """, [store, .text(original), .integer(time)]) {
                guard let id = row[0].identifier(TransactionID.self), let state = row[1].string.flatMap(PurchaseState.init(rawValue:)),
                      Lifecycle.transition(from: state, on: .expire, type: row[2].string.flatMap(ProductType.init(rawValue:)) ?? .unknown)
                          .effects.contains(.endEntitlement) else { continue }
                for entitlement in try connection.query("""
                    UPDATE entitlements SET active = 0, expires_at = CASE WHEN expires_at IS NULL OR expires_at > $3 THEN $3 ELSE expires_at END
                    WHERE store = $1 AND transaction_id = $2 AND active = 1 RETURNING entitlement
                    """, [store, .text(id), .integer(PurchaseTime.milliseconds(now))]) {
                    if let code = entitlement[0].identifier(ItemCode.self) { ended.insert(code) }
                }
            }
            return ended.isEmpty ? .nothingToEnd(state: current.state) : .ended(entitlements: ended.sorted())
        }
    }

    /// The store moved the renewal date of the period `key` paid for to `expiresDate` (RENEWAL_EXTENDED: the transaction
    /// signed again with a later `expiresDate`): its active entitlements and its recorded expiry move there. Never earlier:
    /// an older copy of the transaction changes nothing; an ended period is not revived. A repeat (a redelivery, the app
    /// submitting the extended transaction) answers `extended` again and changes nothing. A period revoked meanwhile
    /// records the date, for its refund's reversal to give back.
    public func extendSubscription(_ key: PurchaseKey, to expiresDate: Date, at now: Date) async throws -> ExtendOutcome {
        try await decide(key, on: .renewalExtended) { _, connection, current, transition in
            guard transition.effects.contains(.recordExpiry) || transition.effects.contains(.extendEntitlement) else { return .unchanged(state: current.state) }
            // Never past the start of the period that replaced it.
            let until = try Self.supersededAt(connection, key).map { min($0, expiresDate) } ?? expiresDate
            let values: [SQLValue] = [.text(key.store.rawValue), .text(key.transactionId), .integer(PurchaseTime.milliseconds(until))]
            let recordExpiry = "UPDATE purchases SET expires_at = $3 WHERE store = $1 AND transaction_id = $2 AND (expires_at IS NULL OR expires_at < $3)"
            if transition.effects.contains(.recordExpiry) {
                try connection.query(recordExpiry, values)
                return .unchanged(state: current.state)
            }
            let moved = try connection.query("""
                UPDATE entitlements SET expires_at = $3 WHERE store = $1 AND transaction_id = $2 AND active = 1 AND expires_at < $3 RETURNING entitlement
                """, values).compactMap { $0[0].identifier(ItemCode.self) }
            if !moved.isEmpty {
                try connection.query(recordExpiry, values)
                return .extended(entitlements: moved.sorted(), until: until)
            }
            // Extended to this date before: in force until then, later than its grant gave.
            let before = try connection.query("""
                SELECT e.entitlement FROM entitlements e WHERE e.store = $1 AND e.transaction_id = $2 AND e.active = 1 AND e.expires_at = $3
                    AND $3 > (SELECT max(l.expires_at) FROM ledger l WHERE l.store = $1 AND l.transaction_id = $2 AND l.item_kind = 'entitlement'
                              AND l.code = e.entitlement AND l.entry_kind IN ('grant', 'regrant'))
                """, values).compactMap { $0[0].identifier(ItemCode.self) }
            return before.isEmpty ? .unchanged(state: current.state) : .extended(entitlements: before.sorted(), until: until)
        }
    }

    /// `items` (what `key` granted, from its ledger) with each expiring entitlement of a subscription period until the
    /// purchase's recorded expiry when that is later (the renewal date the store moved since the grant), and ending by
    /// the start of the period that replaced it (`supersededAt`).
    static func withCurrentExpiry(_ items: [GrantItem], _ connection: any SQLConnection, _ key: PurchaseKey) throws -> [GrantItem] {
        guard items.contains(where: { $0.kind == .entitlement && $0.expiresAt != nil }) else { return items }
        return try withCurrentExpiry(items, connection, Period(connection, key))
    }

    /// `withCurrentExpiry` of the period read already (nil: not a subscription period, `items` as they are).
    static func withCurrentExpiry(_ items: [GrantItem], _ connection: any SQLConnection, _ period: Period?) throws -> [GrantItem] {
        guard let period, items.contains(where: { $0.kind == .entitlement && $0.expiresAt != nil }) else { return items }
        var current = items
        if let recorded = period.recordedExpiry { current = current.map { $0.lasting(until: recorded) } }
        if let end = try supersededAt(connection, period) { current = current.map { $0.ending(by: end) } }
        return current
    }

    /// A subscription period (`autoRenewable`): its subscription, its start, its product, its recorded expiry.
    struct Period {
        let key: PurchaseKey, original: String, start: Int64, product: String, recordedExpiry: Date?

        init?(_ connection: any SQLConnection, _ key: PurchaseKey) throws {
            guard let row = try connection.query("""
                      SELECT coalesce(original_transaction_id, transaction_id), purchase_time, product_id, expires_at FROM purchases
                      WHERE store = $1 AND transaction_id = $2 AND product_type = 'autoRenewable'
                      """, [.text(key.store.rawValue), .text(key.transactionId)]).first,
                  let original = row[0].string, let start = row[1].int64, let product = row[2].string else { return nil }
            (self.key, self.original, self.start, self.product, recordedExpiry) = (key, original, start, product, row[3].int64.map(PurchaseTime.date))
        }

        /// `$1` the store, `$2` the original transaction id (`ofOriginalCondition`), `$3` the start, `$4` the product.
        var values: [SQLValue] { [.text(key.store.rawValue), .text(original), .integer(start), .text(product)] }
    }

    /// When the subscription period `key` was replaced: the earliest start of a later period of the same subscription, of
    /// another product, that was granted (its entitlements given, whatever became of them since), whoever holds it now.
    /// Nil when none: renewals of the same product, and a downgrade, which begins when the period ends, do not end it early.
    static func supersededAt(_ connection: any SQLConnection, _ key: PurchaseKey) throws -> Date? {
        try Period(connection, key).flatMap { try supersededAt(connection, $0) }
    }

    static func supersededAt(_ connection: any SQLConnection, _ period: Period) throws -> Date? {
        try connection.query("""
            SELECT min(p.purchase_time) FROM purchases p WHERE p.store = $1 AND \(ofOriginalCondition) AND p.purchase_time > $3 AND p.product_id <> $4
                AND EXISTS (SELECT 1 FROM entitlements e WHERE e.store = p.store AND e.transaction_id = p.transaction_id)
            """, period.values).first?[0].int64.map(PurchaseTime.date)
    }

    /// At the grant (or re-grant) of subscription period `key`: what earlier periods of the subscription's other products
    /// still give past its start ends at its start, and those periods are answered (`ended`: one for each holder); and it
    /// ends by the start of a later one granted before it (`endsBy`; nil: it lasts as granted). PostgreSQL: under a lock of
    /// the subscription, so that two of its periods granted at once (to two users, after a restore: on two partitions) each
    /// see the other's entitlements.
    static func endSupersededPeriods(_ connection: any SQLConnection, _ key: PurchaseKey,
                                     _ dialect: Migrations.Dialect) throws -> (endsBy: Date?, ended: [EndedPeriod]) {
        guard let period = try Period(connection, key) else { return (nil, []) }
        if dialect == .postgres {
            try connection.query("SELECT pg_advisory_xact_lock(hashtextextended('subscription:' || $1 || ':' || $2, 0))",
                                 [.text(key.store.rawValue), .text(period.original)])
        }
        let capped = try connection.query("""
            UPDATE entitlements SET expires_at = $3 WHERE store = $1 AND active = 1 AND expires_at > $3 AND \(earlierPeriodsOfOtherProducts("transaction_id"))
            RETURNING transaction_id, user_id, entitlement
            """, period.values)
        let ended = try endedPeriods(capped, store: key.store, at: PurchaseTime.date(period.start), connection)
        guard let end = try supersededAt(connection, period) else { return (nil, ended) }
        try connection.query("UPDATE entitlements SET expires_at = $3 WHERE store = $1 AND transaction_id = $2 AND expires_at > $3",
                             [.text(key.store.rawValue), .text(key.transactionId), .integer(PurchaseTime.milliseconds(end))])
        return (end, ended)
    }

    /// The periods the subscription period `period`, an upgrade, ended at its start when it was granted, as that answered them
    /// (`endSupersededPeriods`): for its repeats, so that a grant whose answers were lost (a worker killed before they were
    /// acknowledged) answers them again. Periods that ended at that date by themselves are not among them.
    static func periodsEndedBy(_ connection: any SQLConnection, _ period: Period) throws -> [EndedPeriod] {
        let rows = try connection.query("""
            SELECT e.transaction_id, e.user_id, e.entitlement FROM entitlements e WHERE e.store = $1 AND e.active = 1 AND e.expires_at = $3
                AND \(earlierPeriodsOfOtherProducts("e.transaction_id"))
                AND (EXISTS (SELECT 1 FROM ledger l WHERE l.store = e.store AND l.transaction_id = e.transaction_id AND l.item_kind = 'entitlement'
                             AND l.code = e.entitlement AND l.expires_at > $3)
                     OR EXISTS (SELECT 1 FROM purchases p WHERE p.store = e.store AND p.transaction_id = e.transaction_id AND p.expires_at > $3))
            """, period.values)
        return try endedPeriods(rows, store: period.key.store, at: PurchaseTime.date(period.start), connection)
    }

    /// `column` names a transaction of a period of the subscription that began before the period of `Period.values` and is of
    /// another product: what that period, an upgrade, ends at its start.
    private static func earlierPeriodsOfOtherProducts(_ column: String) -> String {
        "\(column) IN (SELECT transaction_id FROM purchases WHERE store = $1 AND \(ofOriginalCondition) AND purchase_time < $3 AND product_id <> $4)"
    }

    /// The periods an upgrade beginning at `start` ended, from their entitlement rows it capped (transaction id, holder,
    /// entitlement): one for each holder, with those entitlements ending then. From the rows, not the ledger: in a batch the
    /// period's own grant may have written its rows and not yet its ledger entries, and a period given by a refund's
    /// reversal has no `grant` entries.
    private static func endedPeriods(_ rows: [SQLRow], store: Store, at start: Date, _ connection: any SQLConnection) throws -> [EndedPeriod] {
        struct Holding: Hashable { let transactionId: TransactionID, holder: UserID }
        var entitlements: [Holding: Set<ItemCode>] = [:]
        for row in rows {
            if let id = row[0].identifier(TransactionID.self), let holder = row[1].identifier(UserID.self), let code = row[2].identifier(ItemCode.self) {
                entitlements[Holding(transactionId: id, holder: holder), default: []].insert(code)
            }
        }
        return try entitlements.sorted { ($0.key.transactionId, $0.key.holder) < ($1.key.transactionId, $1.key.holder) }.compactMap { holding, codes in
            let key = PurchaseKey(store: store, transactionId: holding.transactionId)
            guard let row = try connection.query("SELECT product_id, quantity FROM purchases WHERE store = $1 AND transaction_id = $2",
                                                 [.text(store.rawValue), .text(key.transactionId)]).first,
                  let product = row[0].identifier(ProductID.self), let quantity = row[1].int64 else { return nil }
            return EndedPeriod(key: key, userId: holding.holder, productId: product, quantity: Int(quantity), endedAt: start,
                               items: codes.sorted().map { .entitlement($0, until: start) })
        }
    }

    /// `endSupersededPeriods` for a grant or re-grant of `items` to the purchase `current`, when it is a subscription
    /// period's: its answer, else none at no cost.
    static func endingSupersededPeriods(_ current: CurrentPurchase, _ items: [GrantItem], _ connection: any SQLConnection,
                                        _ key: PurchaseKey, _ dialect: Migrations.Dialect) throws -> (endsBy: Date?, ended: [EndedPeriod]) {
        guard current.type == .autoRenewable, items.contains(where: { $0.kind == .entitlement && $0.expiresAt != nil }) else { return (nil, []) }
        return try endSupersededPeriods(connection, key, dialect)
    }
}

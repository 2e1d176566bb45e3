import Database
import Foundation
import PurchaseDomain

/// What the store takes back or gives again after the grant: refunds and revocations (in any order with the
/// purchase), reversed refunds, and the end of a subscription period.
extension SQLPurchaseStore {
    /// Reverses a purchase's grants (refund, revocation, or a due refund being clawed back). A balance never goes
    /// negative: what was already spent is recorded as the shortfall and reported. A purchase not seen yet gets a
    /// tombstone, so that it is refused when it arrives.
    /// - Parameter decidedAt: when the store decided (its notification's `signedDate`): a decision older than one already
    ///   taken about the purchase (a reversal of this refund that came first) is `outdated`. Nil: not ordered (a due refund
    ///   clawed back).
    /// - Parameter onlyIfDue: a due refund clawed back (`refund.due`, `LifecycleEvent.clawBack`): only from a purchase still
    ///   flagged refund-due.
    public func revoke(_ key: PurchaseKey, reason: String = "REFUND", decidedAt: Date? = nil, onlyIfDue: Bool = false, share: RefundShare.Part? = nil,
                       at now: Date) async throws -> RevokeOutcome {
        try await decide(key, on: onlyIfDue ? .clawBack : .revoke) { _, connection, current, transition in
            guard try Self.takeRefundDecision(connection, key, decidedAt: decidedAt) else { return .outdated }
            switch transition.outcome {
            case .repeated: return .alreadyRevoked
            case .waiting, .refused, .ignored: return .notRevocable(state: current.state)
            case .applied: break
            }
            let at = SQLValue.integer(PurchaseTime.milliseconds(now))
            if transition.effects.contains(.recordTombstone) {
                try connection.query("""
                    INSERT INTO tombstones (store, transaction_id, reason, revoked_at) VALUES ($1, $2, $3, $4)
                    ON CONFLICT (store, transaction_id) DO UPDATE SET reason = excluded.reason, revoked_at = excluded.revoked_at, reversed_at = NULL
                    """, [.text(key.store.rawValue), .text(key.transactionId), .text(reason), at])
                return .recordedBeforePurchase
            }
            var shortfall: [ItemCode: Int64] = [:]
            if transition.effects.contains(.reverseGrants), let userId = current.userId {
                // Refunded units are a part of the quantity the purchase was granted for.
                let quantity = if case .units? = share {
                    try connection.query("SELECT quantity FROM purchases WHERE store = $1 AND transaction_id = $2",
                                         [.text(key.store.rawValue), .text(key.transactionId)]).first?[0].int64.map { Int(clamping: $0) } ?? 1
                } else { 1 }
                for held in try Self.heldItems(connection, key) {
                    var item = held
                    if item.kind == .currency { item.amount = RefundShare.takenBack(item.amount, part: share, of: quantity) }
                    var missing: Int64 = 0
                    switch item.kind {
                    case .currency:
                        // Locked until the commit on PostgreSQL (SQLite's writer holds the database): another refund of the
                        // user's, or the game spending, must not take what this one read as there (CHECK amount >= 0).
                        let balance = try connection.query("""
                            SELECT amount FROM balances WHERE user_id = $1 AND currency = $2\(self.dialect == .postgres ? " FOR UPDATE" : "")
                            """, [.text(userId), .text(item.code)]).first?[0].int64 ?? 0
                        let taken = min(balance, item.amount)
                        missing = item.amount - taken
                        try connection.query("UPDATE balances SET amount = amount - $3 WHERE user_id = $1 AND currency = $2",
                                             [.text(userId), .text(item.code), .integer(taken)])
                        if missing > 0 { shortfall[item.code, default: 0] += missing }
                    case .entitlement:
                        // What this purchase gives, whoever holds it now (a restore may have moved it); other purchases' stay.
                        try connection.query("UPDATE entitlements SET active = 0 WHERE entitlement = $1 AND store = $2 AND transaction_id = $3",
                                             [.text(item.code), .text(key.store.rawValue), .text(key.transactionId)])
                    }
                    try connection.query("""
                        INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, shortfall, created_at)
                        VALUES ($1, $2, 'revoke', $3, $4, $5, $6, $7, $8)
                        """, [.text(key.store.rawValue), .text(key.transactionId), .text(userId), .text(item.kind.rawValue), .text(item.code),
                              .integer(-item.amount), .integer(missing), at])
                }
            }
            try Self.setState(connection, key, transition.to, timeColumn: "revoked_at", at: now)
            return .revoked(shortfall: shortfall)
        }
    }

    /// A refund reversed by the store (REFUND_REVERSED): a revoked purchase gets back what its refund took back (not what
    /// the user had spent before it, the refund's shortfall: the user is where they were before the refund), or `items`
    /// if it was revoked before its grant, and is finished; a tombstone is cleared. Once: a second reversal changes nothing.
    /// Revoked before its grant with nothing to give (`items` empty: its product unknown to the catalog), or nobody's (a
    /// charge no submission claimed), it goes back to where its refund found it, `verified` or `unclaimed`: nothing is
    /// granted, so nothing is finished (rule 1), and nothing is granted to nobody (`RefundReversal`).
    /// - Parameter decidedAt: when the store reversed the refund (its notification's `signedDate`): taken first, before
    ///   its refund, the reversal makes that refund `outdated` when it comes; older than a refund taken since, it is.
    public func reinstate(_ key: PurchaseKey, items: [GrantItem], decidedAt: Date? = nil, at now: Date) async throws -> ReinstateOutcome {
        let reversal: @Sendable (any SQLConnection, CurrentPurchase) throws -> LifecycleEvent = { connection, current in
            let takenBack = current.state == .revoked ? try Self.takenBack(connection, key) : nil
            return .refundReversed(RefundReversal(owner: current.userId.flatMap { $0 == .nobody ? nil : $0 }, tookBackGrants: takenBack != nil,
                                                  hasItemsToGive: (takenBack ?? items).contains { $0.amount > 0 }))
        }
        return try await decide(key, on: reversal) { _, connection, current, transition in
            // What it gives back, checked before anything is written (the decision included): past a balance's limit, it
            // is refused whole (`BalanceOutOfRange`), and a later reversal of the same refund is judged afresh.
            let regranting = transition.outcome == .applied && transition.effects.contains(.regrantItems)
            var granted = regranting ? (try Self.takenBack(connection, key) ?? items).filter { $0.amount > 0 } : []
            if let userId = current.userId, granted.contains(where: { $0.kind == .currency }),
               let refusal = BalanceOutOfRange.first(of: granted, adding: try Self.readBalances(connection, of: [userId], lock: true, self.dialect)[userId] ?? [:]) {
                throw refusal
            }
            guard try Self.takeRefundDecision(connection, key, decidedAt: decidedAt) else { return .outdated }
            guard transition.outcome == .applied else { return .notRevoked(state: current.state) }
            if transition.effects.contains(.clearTombstone) {
                try connection.query("UPDATE tombstones SET reversed_at = $3 WHERE store = $1 AND transaction_id = $2",
                                     [.text(key.store.rawValue), .text(key.transactionId), .integer(PurchaseTime.milliseconds(now))])
                return .tombstoneCleared
            }
            guard regranting else {
                // Never granted: as its refund found it, its times as they were.
                try connection.query("UPDATE purchases SET state = $3 WHERE store = $1 AND transaction_id = $2",
                                     [.text(key.store.rawValue), .text(key.transactionId), .text(transition.to.rawValue)])
                return .returned(to: transition.to)
            }
            let applied = try Self.apply(granted, entry: "regrant", connection, key, userId: current.userId ?? .nobody, at: now, self.dialect)
            let superseded = try Self.endingSupersededPeriods(current, granted, connection, key, self.dialect)
            if let end = superseded.endsBy { granted = granted.map { $0.ending(by: end) } }
            try Self.setState(connection, key, transition.to, timeColumn: "finished_at", at: now)
            // Revoked before its grant: the re-grant is its grant.
            try connection.query("UPDATE purchases SET granted_at = $3 WHERE store = $1 AND transaction_id = $2 AND granted_at IS NULL",
                                 [.text(key.store.rawValue), .text(key.transactionId), .integer(PurchaseTime.milliseconds(now))])
            return .reinstated(items: granted, ledgerEntryIds: applied.ledgerEntryIds, balances: applied.balances, ended: superseded.ended)
        }
    }

    /// The store's latest refund decision about `key` taken (`revoke` or `reinstate` with its `decidedAt`, an outdated
    /// one not): when the store made it. Nil when none was.
    public func latestRefundDecision(_ key: PurchaseKey) async throws -> Date? {
        try await executor.run { connection in
            try connection.query("SELECT decided_at FROM refund_decisions WHERE store = $1 AND transaction_id = $2",
                                 [.text(key.store.rawValue), .text(key.transactionId)]).first?[0].int64.map(PurchaseTime.date)
        }
    }

    /// Records `decidedAt` as the store's latest refund decision about `key` (under the purchase's lock, `decide`), unless
    /// a later one is recorded: then this one is outdated (false). Nil is not ordered: always taken, nothing recorded.
    static func takeRefundDecision(_ connection: any SQLConnection, _ key: PurchaseKey, decidedAt: Date?) throws -> Bool {
        guard let decidedAt else { return true }
        // One statement: kept unless a later decision is recorded, and then nothing is written.
        try connection.query("""
            INSERT INTO refund_decisions (store, transaction_id, decided_at) VALUES ($1, $2, $3)
            ON CONFLICT (store, transaction_id) DO UPDATE SET decided_at = excluded.decided_at WHERE refund_decisions.decided_at <= excluded.decided_at
            """, [.text(key.store.rawValue), .text(key.transactionId), .integer(PurchaseTime.milliseconds(decidedAt))])
        return connection.changes > 0
    }

    /// What the purchase's last revocation took back, per item: its entries (those after the last re-grant) less their
    /// shortfall, what the balance could not give; an entitlement until the expiry its grants gave (or the store moved it
    /// to since). Nil when it wrote none: revoked before its grant. (Ids order these entries: revocations and re-grants write theirs at once, under
    /// the purchase's lock; only grants' ids are reserved ahead, `applyDeferring`.)
    static func takenBack(_ connection: any SQLConnection, _ key: PurchaseKey) throws -> [GrantItem]? {
        let rows = try connection.query("""
            SELECT r.item_kind, r.code, sum(-r.amount - r.shortfall), (SELECT max(g.expires_at) FROM ledger g
                WHERE g.store = r.store AND g.transaction_id = r.transaction_id AND g.entry_kind IN ('grant', 'regrant')
                    AND g.item_kind = r.item_kind AND g.code = r.code)
            FROM ledger r
            WHERE r.store = $1 AND r.transaction_id = $2 AND r.entry_kind = 'revoke'
                AND r.id > coalesce((SELECT max(id) FROM ledger WHERE store = $1 AND transaction_id = $2 AND entry_kind = 'regrant'), 0)
            GROUP BY r.store, r.transaction_id, r.item_kind, r.code ORDER BY r.item_kind, r.code
            """, [.text(key.store.rawValue), .text(key.transactionId)])
        guard !rows.isEmpty else { return nil }
        return try withCurrentExpiry(rows.compactMap(grantItem), connection, key)
    }
}

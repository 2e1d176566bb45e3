import Database
import Foundation
import PurchaseDomain

/// The sweeper's queries: purchases paid but left unconsumed past their store's deadline, and the outbox of
/// their `refund.due` events.
extension SQLPurchaseStore {
    /// Flags purchases of `store` paid but not finished, purchased before `now - deadline`, as `refund_due`, when
    /// the lifecycle says so (consumables only) and they are not known consumed (the app reported it, maybe before the
    /// grant, or the store did at verification: their grant finishes them); returns those this call flagged. Several
    /// sweepers at once flag each purchase exactly once: the state change is conditional, and PostgreSQL skips rows
    /// another sweeper holds.
    /// - Parameter leavingRecheckable: leaves the purchases `dueGrantedWithToken` finds to the sweeper's re-check with the
    ///   store, which flags those the store answered not consumed (`flagDue`).
    public func sweepDue(store: Store, deadline: TimeInterval, now: Date, limit: Int = 500, leavingRecheckable: Bool = false) async throws -> [DuePurchase] {
        let dialect = dialect
        let cutoff = PurchaseTime.milliseconds(now.addingTimeInterval(-deadline))
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                let query = leavingRecheckable ? Self.openPurchasesDueLeavingRecheckableQuery : Self.openPurchasesDueQuery
                let lock = dialect == .postgres ? " FOR UPDATE SKIP LOCKED" : ""
                var rows = try connection.query(query + lock, [.text(store.rawValue), .integer(cutoff), .integer(Int64(limit))])
                // Then charges nobody claimed (not open: nothing is owed to a user), from an index of their own.
                if rows.count < limit, let unclaimed = Self.unclaimedDueQuery {
                    rows += try connection.query(unclaimed + lock, [.text(store.rawValue), .integer(cutoff), .integer(Int64(limit - rows.count))])
                }
                return try Self.flag(rows, connection, now: now, deadline: deadline)
            }
        }
    }

    /// Flags those of `keys` that are still due as `sweepDue` would (exactly once, however many sweepers run): for
    /// purchases the store was asked about again and answered not consumed. Returns those this call flagged.
    public func flagDue(_ keys: [PurchaseKey], deadline: TimeInterval, now: Date) async throws -> [DuePurchase] {
        guard !keys.isEmpty else { return [] }
        let dialect = dialect
        let cutoff = PurchaseTime.milliseconds(now.addingTimeInterval(-deadline))
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                var rows: [[SQLValue]] = []
                for key in keys {
                    rows += try connection.query(Self.dueByKeyQuery + (dialect == .postgres ? " FOR UPDATE SKIP LOCKED" : ""),
                                                 [.text(key.store.rawValue), .integer(cutoff), .text(key.transactionId)])
                }
                return try Self.flag(rows, connection, now: now, deadline: deadline)
            }
        }
    }

    /// Flags the purchases of `rows` (`recordColumns`, read as due in this transaction) the lifecycle flags; those this flagged.
    private static func flag(_ rows: [[SQLValue]], _ connection: any SQLConnection, now: Date, deadline: TimeInterval) throws -> [DuePurchase] {
        var due: [DuePurchase] = []
        for row in rows {
            guard var record = Self.record(row) else { continue }
            let transition = Lifecycle.transition(from: record.state, on: .deadlinePassed, type: record.productType)
            guard transition.effects.contains(.flagRefundDue) else { continue }
            try connection.query("""
                UPDATE purchases SET state = $4, refund_due_at = $3
                WHERE store = $1 AND transaction_id = $2 AND \(LifecycleConditions.state(in: Lifecycle.dueStates)) AND \(Self.notKnownConsumed)
                """, [.text(record.key.store.rawValue), .text(record.key.transactionId), .integer(PurchaseTime.milliseconds(now)),
                      .text(transition.to.rawValue)])
            guard connection.changes == 1 else { continue }
            let previous = record.state
            record.state = transition.to
            due.append(DuePurchase(record: record, previousState: previous, deadline: record.purchaseTime.addingTimeInterval(deadline)))
        }
        return due
    }

    /// Granted consumables of `store` past `now - deadline`, not known consumed, that carry a token to ask the store about
    /// again, by purchase time (then transaction id): the page of `limit` after `last`, the last purchase of the page before.
    public func dueGrantedWithToken(store: Store, deadline: TimeInterval, now: Date, after last: PurchaseRecord? = nil,
                                    limit: Int = 500) async throws -> [PurchaseRecord] {
        try await duePage(Self.grantedWithTokenDueQuery, store: store, deadline: deadline, now: now, after: last, limit: limit)
    }

    /// Every purchase of `store` the deadline flags (open ones and charges nobody claimed), not flagged, by purchase time
    /// (then transaction id): the page of `limit` after `last`. For a store asked about each before it is flagged (`flagDue`).
    public func dueToAsk(store: Store, deadline: TimeInterval, now: Date, after last: PurchaseRecord? = nil, limit: Int = 500) async throws -> [PurchaseRecord] {
        try await duePage(Self.dueToAskQuery, store: store, deadline: deadline, now: now, after: last, limit: limit)
    }

    /// A page of `query` ($1 store, $2 cutoff, $3 limit, $4 and $5 the position after `last`).
    private func duePage(_ query: String, store: Store, deadline: TimeInterval, now: Date, after last: PurchaseRecord?, limit: Int) async throws -> [PurchaseRecord] {
        let cutoff = PurchaseTime.milliseconds(now.addingTimeInterval(-deadline))
        let position: [SQLValue] = last.map { [.integer(PurchaseTime.milliseconds($0.purchaseTime)), .text($0.key.transactionId)] }
            ?? [.integer(.min), .text("")]
        return try await executor.run { connection in
            try connection.query(query, [.text(store.rawValue), .integer(cutoff), .integer(Int64(limit))] + position).compactMap(Self.record)
        }
    }

    /// Purchases flagged `refund_due` whose `refund.due` event is not recorded as sent (the outbox).
    public func unsentRefundNotices(store: Store, deadline: TimeInterval, limit: Int = 500) async throws -> [DuePurchase] {
        try await executor.run { connection in
            try connection.query(Self.unsentRefundNoticesQuery, [.text(store.rawValue), .integer(Int64(limit))]).compactMap(Self.record).map { record in
                DuePurchase(record: record, previousState: Lifecycle.flaggedState, deadline: record.purchaseTime.addingTimeInterval(deadline))
            }
        }
    }

    // The sweeper's queries, each answered from a partial index (migrations 7 and 9): their conditions include the index's
    // own word for word, both PostgreSQL's (`is_open`, `refund_unsent`) and SQLite's (on `state`), as SQLite needs to use
    // it ($1 store, $2 the cutoff in epoch milliseconds, then the limit).

    /// Neither the app nor the store reported the purchase consumed.
    static let notKnownConsumed = "consumed_at IS NULL AND store_consumed = 0"

    /// Open purchases of a type flagged when unconsumed, not known consumed, purchased before the cutoff ($2).
    static let dueCondition = """
        is_open AND \(LifecycleConditions.state(in: Lifecycle.dueStates.filter(Lifecycle.openStates.contains))) AND \(LifecycleConditions.productType(in: Lifecycle.typesFlaggedAtDeadline))
        AND purchase_time < $2 AND \(notKnownConsumed)
        """

    /// What the sweeper may ask the store about again: granted consumables with the store's token.
    static let recheckable = """
        \(LifecycleConditions.state(in: Lifecycle.recheckableStates)) AND \(LifecycleConditions.productType(in: Lifecycle.typesFlaggedAtDeadline)) \
        AND purchase_token IS NOT NULL
        """

    /// Purchases due (`purchases_open_by_time`).
    static let openPurchasesDueQuery = """
        SELECT \(recordColumns) FROM purchases WHERE store = $1 AND \(dueCondition)
        ORDER BY purchase_time LIMIT $3
        """

    /// Purchases due but those the store is asked about again (`purchases_open_by_time`).
    static let openPurchasesDueLeavingRecheckableQuery = """
        SELECT \(recordColumns) FROM purchases WHERE store = $1 AND \(dueCondition) AND NOT (\(recheckable))
        ORDER BY purchase_time LIMIT $3
        """

    /// Due purchases that are not open: charges the store announced that nobody claimed (`purchases_unclaimed`; the
    /// lifecycle's due states are open or unclaimed); nil if the lifecycle flags none such.
    static let unclaimedDueQuery: String? = unclaimedDueCondition.map { condition in
        "SELECT \(recordColumns) FROM purchases WHERE store = $1 AND \(condition) ORDER BY purchase_time LIMIT $3"
    }

    /// Charges nobody claimed, of a type flagged when unconsumed, not known consumed, paid before the cutoff ($2); nil if
    /// the lifecycle flags none such.
    static let unclaimedDueCondition: String? = Lifecycle.dueStates.contains(.unclaimed)
        ? "\(unclaimedCondition) AND \(LifecycleConditions.productType(in: Lifecycle.typesFlaggedAtDeadline)) AND purchase_time < $2 AND \(notKnownConsumed)"
        : nil

    /// Whatever the deadline flags: open purchases due, and charges nobody claimed that are due.
    static let anyDueCondition = "((\(dueCondition))" + (unclaimedDueCondition.map { " OR (\($0))" } ?? "") + ")"

    /// One purchase ($3) if it is due (by its key).
    static let dueByKeyQuery = "SELECT \(recordColumns) FROM purchases WHERE store = $1 AND transaction_id = $3 AND \(anyDueCondition)"

    /// Every purchase due, after the purchase time $4 and transaction id $5: those of a store asked about each before it is flagged.
    static let dueToAskQuery = """
        SELECT \(recordColumns) FROM purchases
        WHERE store = $1 AND \(anyDueCondition) AND (purchase_time > $4 OR (purchase_time = $4 AND transaction_id > $5))
        ORDER BY purchase_time, transaction_id LIMIT $3
        """

    /// Purchases due that the store is asked about again, after the purchase time $4 and transaction id $5
    /// (`purchases_open_by_time`).
    static let grantedWithTokenDueQuery = """
        SELECT \(recordColumns) FROM purchases
        WHERE store = $1 AND \(dueCondition) AND \(recheckable) AND (purchase_time > $4 OR (purchase_time = $4 AND transaction_id > $5))
        ORDER BY purchase_time, transaction_id LIMIT $3
        """

    /// Purchases flagged `refund_due` whose notice is not recorded as sent (`purchases_refund_outbox`; $2 the limit).
    static let unsentRefundNoticesQuery = """
        SELECT \(recordColumns) FROM purchases
        WHERE store = $1 AND refund_unsent AND \(LifecycleConditions.state(in: [Lifecycle.flaggedState])) AND refund_notified_at IS NULL ORDER BY purchase_time LIMIT $2
        """

    /// Records that the `refund.due` events of these purchases were acknowledged by the broker.
    public func markRefundNoticesSent(_ keys: [PurchaseKey], at now: Date) async throws {
        try await executor.run { connection in
            for key in keys {
                try connection.query("UPDATE purchases SET refund_notified_at = $3 WHERE store = $1 AND transaction_id = $2",
                                     [.text(key.store.rawValue), .text(key.transactionId), .integer(PurchaseTime.milliseconds(now))])
            }
        }
    }
}

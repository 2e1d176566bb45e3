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
    public func sweepDue(store: Store, deadline: TimeInterval, now: Date, limit: Int = 500,
                         excluding excluded: Set<PurchaseKey> = []) async throws -> [DuePurchase] {
        let dialect = dialect
        let cutoff = now.addingTimeInterval(-deadline)
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                let skipLocked = dialect == .postgres ? " FOR UPDATE SKIP LOCKED" : ""
                let rows = try connection.query(Self.openPurchasesDueQuery + skipLocked,
                                                [.text(store.rawValue), .integer(PurchaseTime.milliseconds(cutoff)), .integer(Int64(limit))])
                var due: [DuePurchase] = []
                for row in rows {
                    guard var record = Self.record(row), !excluded.contains(record.key) else { continue }
                    let transition = Lifecycle.transition(from: record.state, on: .deadlinePassed, type: record.productType)
                    guard transition.effects.contains(.flagRefundDue) else { continue }
                    try connection.query("""
                        UPDATE purchases SET state = $4, refund_due_at = $3
                        WHERE store = $1 AND transaction_id = $2 AND state IN ('verified', 'granted') AND \(Self.notKnownConsumed)
                        """, [.text(store.rawValue), .text(record.key.transactionId), .integer(PurchaseTime.milliseconds(now)), .text(transition.to.rawValue)])
                    guard connection.changes == 1 else { continue }
                    let previous = record.state
                    record.state = transition.to
                    due.append(DuePurchase(record: record, previousState: previous, deadline: record.purchaseTime.addingTimeInterval(deadline)))
                }
                return due
            }
        }
    }

    /// Granted consumables of `store` past `now - deadline` that carry a token to ask the store about again.
    public func dueGrantedWithToken(store: Store, deadline: TimeInterval, now: Date, limit: Int = 500) async throws -> [PurchaseRecord] {
        let cutoff = PurchaseTime.milliseconds(now.addingTimeInterval(-deadline))
        return try await executor.run { connection in
            try connection.query(Self.grantedWithTokenDueQuery, [.text(store.rawValue), .integer(cutoff), .integer(Int64(limit))]).compactMap(Self.record)
        }
    }

    /// Purchases flagged `refund_due` whose `refund.due` event is not recorded as sent (the outbox).
    public func unsentRefundNotices(store: Store, deadline: TimeInterval, limit: Int = 500) async throws -> [DuePurchase] {
        try await executor.run { connection in
            try connection.query(Self.unsentRefundNoticesQuery, [.text(store.rawValue), .integer(Int64(limit))]).compactMap(Self.record).map { record in
                DuePurchase(record: record, previousState: .refundDue, deadline: record.purchaseTime.addingTimeInterval(deadline))
            }
        }
    }

    // The sweeper's queries, each answered from a partial index (migrations 7 and 9): their conditions include the index's
    // own word for word, both PostgreSQL's (`is_open`, `refund_unsent`) and SQLite's (on `state`), as SQLite needs to use
    // it ($1 store, $2 the cutoff in epoch milliseconds, then the limit).

    /// Neither the app nor the store reported the purchase consumed.
    static let notKnownConsumed = "consumed_at IS NULL AND store_consumed = 0"

    /// Open purchases of a type flagged when unconsumed, not known consumed, purchased before the cutoff (`purchases_open_by_time`).
    static let openPurchasesDueQuery = """
        SELECT \(recordColumns) FROM purchases
        WHERE store = $1 AND is_open AND state IN ('verified', 'granted') AND product_type IN (\(ProductType.allCases.filter(\.isFlaggedWhenUnconsumed)
            .map { "'\($0.rawValue)'" }.joined(separator: ", "))) AND purchase_time < $2 AND \(notKnownConsumed)
        ORDER BY purchase_time LIMIT $3
        """

    /// Granted consumables with a store token, not known consumed, purchased before the cutoff (`purchases_open_by_time`).
    static let grantedWithTokenDueQuery = """
        SELECT \(recordColumns) FROM purchases
        WHERE store = $1 AND is_open AND state IN ('verified', 'granted') AND state = 'granted' AND product_type = 'consumable' AND purchase_time < $2
            AND purchase_token IS NOT NULL AND \(notKnownConsumed)
        ORDER BY purchase_time LIMIT $3
        """

    /// Purchases flagged `refund_due` whose notice is not recorded as sent (`purchases_refund_outbox`; $2 the limit).
    static let unsentRefundNoticesQuery = """
        SELECT \(recordColumns) FROM purchases
        WHERE store = $1 AND refund_unsent AND state = 'refund_due' AND refund_notified_at IS NULL ORDER BY purchase_time LIMIT $2
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

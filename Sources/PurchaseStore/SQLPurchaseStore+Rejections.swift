import Database
import Foundation
import PurchaseDomain

/// The verdicts refused, kept for their users' histories (`rejections`, migration 28) apart from the purchases: a
/// rejection changes no purchase's lifecycle, and its claimed ids are kept as text to show, never looked up.
extension SQLPurchaseStore {
    /// Keeps `rejections`; one kept already under the same user and cause is left as it is (a redelivered message). In a
    /// batch they are deferred to its next flush, where all of the batch's make one insert (`flush`): a batch of
    /// submissions costs no statement per rejection. Outside one, one insert for all of them.
    public func recordRejections(_ rejections: [RejectionRecord]) async throws {
        guard !rejections.isEmpty else { return }
        let (executor, dialect) = (executor, dialect)
        // Another table than the purchases': neither what the batch read ahead nor its deferred writes are concerned.
        try await executor.run(usingReadAhead: true, inCallingTask: true) { connection in
            guard executor.defersWrites else { return try Self.insertRejections(connection, rejections, dialect) }
            for rejection in rejections { try executor.write(.rejection(rejection), connection) }
        }
    }

    /// Forgets up to `limit` rejections made before `before`, the oldest first (`rejections_by_time`); returns how many.
    public func pruneRejections(before: Date, limit: Int) async throws -> Int {
        try await executor.run { connection in
            try connection.query("""
                DELETE FROM rejections WHERE id IN (SELECT id FROM rejections WHERE rejected_at < $1 ORDER BY rejected_at LIMIT $2)
                """, [.integer(PurchaseTime.milliseconds(before)), .integer(Int64(max(1, limit)))])
            return connection.changes
        }
    }

    /// One insert of `rejections` (per 256 on SQLite), each bounded by `purchase.rejected`'s schema as the stages publish
    /// it; those kept already are skipped.
    static func insertRejections(_ connection: any SQLConnection, _ rejections: [RejectionRecord], _ dialect: Migrations.Dialect) throws {
        guard !rejections.isEmpty else { return }
        let rows: [[String?]] = rejections.map { rejection in
            [bounded(rejection.userId.rawValue, 256), bounded(rejection.causeID, 1024), rejection.store.rawValue,
             rejection.transactionId.map { bounded($0.rawValue, 512) }, rejection.productId.map { bounded($0.rawValue, 256) }, bounded(rejection.reason, 64),
             String(PurchaseTime.milliseconds(rejection.rejectedAt))]
        }
        try inSet(rows, firstParameter: 1, dialect) { set, values in
            // WHERE true: SQLite would otherwise read the upsert's ON CONFLICT as the join constraint of the SELECT.
            try connection.query("""
                INSERT INTO rejections (user_id, cause_id, store, transaction_id, product_id, reason, rejected_at)
                SELECT column1, column2, column3, column4, column5, column6, CAST(column7 AS BIGINT) FROM (\(set)) AS \(rowsAlias(columns: 7, dialect))
                WHERE true ON CONFLICT (user_id, cause_id) DO NOTHING
                """, values)
        }
    }

    /// `text`'s first `count` characters, counted as JSON Schema's `maxLength` counts them (code points).
    private static func bounded(_ text: String, _ count: Int) -> String { IdentifierRule.truncated(text, maxLength: count) }
}

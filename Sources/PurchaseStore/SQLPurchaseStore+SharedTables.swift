import Database
import Foundation

/// The store's database keeps tables of other layers beside the purchases (the runtime's parking ledger), so that every
/// replica sees them and a deployment runs one database. Their SQL lives with their owner; the store lends its
/// connections and its way of selecting rows by sets of keys. Their tables are created by the store's migrations, which
/// are the database's one history.
extension SQLPurchaseStore {
    /// Runs `body` on one of the store's connections, alone: a batch's read-ahead is dropped and its deferred writes are
    /// flushed first, as for any call that is not a purchase decision.
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection, KeySets) throws -> T) async throws -> T {
        let keySets = KeySets(dialect: dialect)
        return try await executor.run { try body($0, keySets) }
    }

    /// Selects rows by sets of key tuples through an index on either engine (see `matching`).
    public struct KeySets: Sendable {
        let dialect: Migrations.Dialect

        /// Runs `body` with a condition that holds for the rows whose `columns` have the values of one of `tuples`, and its
        /// parameters numbered from `firstParameter`; once per group of tuples.
        public func matching(_ columns: [String], _ tuples: [[String]], firstParameter: Int,
                             _ body: (_ condition: String, _ values: [SQLValue]) throws -> Void) throws {
            try SQLPurchaseStore.matching(columns, tuples, firstParameter: firstParameter, dialect, body)
        }
    }
}

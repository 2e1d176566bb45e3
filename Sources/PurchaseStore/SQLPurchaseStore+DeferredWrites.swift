import Database
import Foundation
import PurchaseDomain

/// A write of a purchase row that a batch defers (`StoreExecutor.write`) to make it with the others of its kind in one
/// statement: the verifier's records and the granter's and finisher's state changes, one per purchase and message, and the
/// stages' rejections.
enum DeferredWrite: Sendable {
    /// The purchase's record in `state` (and `reason` for it), stamped `at` in that state's time column; nothing if it is
    /// recorded already (the caller decided under the lock).
    case insert(PurchaseRecord, state: PurchaseState, reason: String?, at: Date)
    /// The purchase moves to `state`, stamped `at` in `timeColumn`.
    case setState(PurchaseKey, PurchaseState, timeColumn: String, at: Date)
    /// A grant's ledger entry, a currency's added to its user's balance (`SQLPurchaseStore.applyDeferring`).
    case ledgerEntry(DeferredLedgerEntry)
    /// A rejection kept for its user's history (`SQLPurchaseStore.recordRejections`).
    case rejection(RejectionRecord)

    /// The purchase whose row the write changes; nil for a ledger entry (entries only add up: their order does not matter)
    /// and a rejection (another table, that no decision reads).
    var key: PurchaseKey? {
        switch self {
        case .insert(let record, _, _, _): record.key
        case .setState(let key, _, _, _): key
        case .ledgerEntry, .rejection: nil
        }
    }
}

extension SQLPurchaseStore {
    /// Makes `writes`, each of a purchase of its own (so that their order does not matter): one alone as its own
    /// statement; several as one insert of the records, then one update per time column and store (per 256 rows on SQLite),
    /// then the ledger entries and what they add to balances (`flushLedger`), then one insert of the rejections.
    static func flush(_ connection: any SQLConnection, _ writes: [DeferredWrite], _ dialect: Migrations.Dialect) throws {
        if writes.count == 1, let write = writes.first {
            switch write {
            case .insert(let record, let state, let reason, let now): return try insert(connection, record, state: state, reason: reason, at: now)
            case .setState(let key, let state, let column, let now): return try setState(connection, key, state, timeColumn: column, at: now)
            case .ledgerEntry(let entry): return try flushLedger(connection, [entry], dialect)
            case .rejection(let rejection): return try insertRejections(connection, [rejection], dialect)
            }
        }
        var records: [[String?]] = []
        var changes: [[String]: [[String?]]] = [:] // rows by time column and store
        var entries: [DeferredLedgerEntry] = []
        var rejections: [RejectionRecord] = []
        for write in writes {
            switch write {
            case .ledgerEntry(let entry):
                entries.append(entry)
            case .rejection(let rejection):
                rejections.append(rejection)
            case .insert(let record, let state, let reason, let now):
                let (at, column) = (String(PurchaseTime.milliseconds(now)), timeColumn(recording: state))
                records.append([record.key.store.rawValue, record.key.transactionId.rawValue, record.originalTransactionId?.rawValue, record.userId.rawValue,
                                record.productId.rawValue,
                                record.productType.rawValue, String(record.quantity), String(PurchaseTime.milliseconds(record.purchaseTime)),
                                record.environment, state.rawValue, reason, column == "verified_at" ? at : nil, column == "rejected_at" ? at : nil,
                                column == "revoked_at" ? at : nil, record.packageName?.rawValue, record.purchaseToken?.rawValue, record.storeConsumed ? "1" : "0",
                                record.expiresDate.map { String(PurchaseTime.milliseconds($0)) }, record.appAccountToken?.rawValue, record.app?.rawValue])
            case .setState(let key, let state, let column, let now):
                changes[[column, key.store.rawValue], default: []].append([key.store.rawValue, key.transactionId.rawValue, state.rawValue,
                                                                          String(PurchaseTime.milliseconds(now))])
            }
        }
        if !records.isEmpty {
            try inSet(records, firstParameter: 1, dialect) { set, values in
                // WHERE true: SQLite would otherwise read the upsert's ON CONFLICT as the join constraint of the SELECT.
                try connection.query("""
                    INSERT INTO purchases (store, transaction_id, original_transaction_id, user_id, product_id, product_type, quantity, purchase_time,
                                           environment, state, reject_reason, verified_at, rejected_at, revoked_at, package_name, purchase_token, store_consumed,
                                           expires_at, app_account_token, app, consumed_at)
                    SELECT column1, column2, column3, column4, column5, column6, CAST(column7 AS BIGINT), CAST(column8 AS BIGINT), column9, column10,
                           column11, CAST(column12 AS BIGINT), CAST(column13 AS BIGINT), CAST(column14 AS BIGINT), column15, column16, CAST(column17 AS BIGINT),
                           CAST(column18 AS BIGINT), column19, column20, \(earlyConsumption(store: "column1", transactionId: "column2"))
                    FROM (\(set)) AS \(rowsAlias(columns: 20, dialect)) WHERE true
                    ON CONFLICT (store, transaction_id) DO NOTHING
                    """, values)
            }
        }
        for (group, rows) in changes.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            try inSet(rows, firstParameter: 1, dialect) { set, values in
                // PostgreSQL: the rows to change named by their keys as well, so that every plan finds them by the key's index
                // (see `matching`); SQLite looks each row of the set up by it.
                var keys = (condition: "true", values: [SQLValue]())
                if dialect == .postgres {
                    try matching(["purchases.store", "purchases.transaction_id"], rows.map { [group[1], $0[1] ?? ""] }, firstParameter: values.count + 1,
                                 dialect) { keys = ($0, $1) }
                }
                try connection.query("""
                    UPDATE purchases SET state = u.column3, \(group[0]) = CAST(u.column4 AS BIGINT) FROM (\(set)) AS \(rowsAlias(columns: 4, dialect))
                    WHERE \(keys.condition) AND purchases.store = u.column1 AND purchases.transaction_id = u.column2
                    """, values + keys.values)
            }
        }
        try flushLedger(connection, entries, dialect)
        try insertRejections(connection, rejections, dialect)
    }

    /// The time column a record inserted in `state` is stamped in.
    static func timeColumn(recording state: PurchaseState) -> String {
        switch state {
        case .rejected: "rejected_at"
        case .revoked: "revoked_at"
        default: "verified_at"
        }
    }

    /// `u`, with the columns of an `inSet` named `column1`… as SQLite names those of its `VALUES` (PostgreSQL's `unnest`
    /// needs them named).
    static func rowsAlias(columns: Int, _ dialect: Migrations.Dialect) -> String {
        dialect == .postgres ? "u(" + (1...columns).map { "column\($0)" }.joined(separator: ", ") + ")" : "u"
    }
}

import Database
import Foundation
import PurchaseDomain

/// The store's SQL building blocks, run on the executor's queue inside the caller's transaction.
extension SQLPurchaseStore {
    /// `readOnly`: a snapshot for reads that takes no write lock (SQLite: a deferred transaction, which WAL serves
    /// from one snapshot; PostgreSQL: REPEATABLE READ READ ONLY, so every statement sees the same state).
    /// Inside a transaction already open (a batch, see `SQLPurchaseStore.batch`), `body` joins it: its effects are
    /// committed or rolled back with the batch's.
    static func transaction<T>(_ connection: any SQLConnection, _ dialect: Migrations.Dialect, readOnly: Bool = false, _ body: () throws -> T) throws -> T {
        if connection.isInTransaction { return try body() }
        // SQLite writers: take the write lock up front, so that two processes cannot both read then write.
        switch (dialect, readOnly) {
        case (.sqlite, false): try connection.query("BEGIN IMMEDIATE")
        case (.sqlite, true): try connection.query("BEGIN")
        case (.postgres, false): try connection.query("BEGIN")
        case (.postgres, true): try connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        }
        do {
            let result = try body()
            try connection.query("COMMIT")
            return result
        } catch {
            _ = try? connection.query("ROLLBACK") // The original error is what matters.
            throw error
        }
    }

    /// A purchase as its lifecycle sees it: its state, owner (nil without a record) and product type.
    struct CurrentPurchase: Sendable {
        var state: PurchaseState
        var userId: String?
        var type: ProductType
    }

    /// Where a purchase is in its lifecycle (its row locked for this transaction on PostgreSQL): its record's
    /// state, else `revokedUnseen` for a tombstone, else `unseen`.
    static func current(_ connection: any SQLConnection, _ key: PurchaseKey, _ dialect: Migrations.Dialect) throws -> CurrentPurchase {
        let lock = dialect == .postgres ? " FOR UPDATE" : ""
        // One statement: the record (if any) and whether a refund came first; both locked.
        let row = try connection.query("""
            SELECT p.state, p.user_id, p.product_type,
                   EXISTS (SELECT 1 FROM tombstones WHERE store = $1 AND transaction_id = $2 AND reversed_at IS NULL\(lock))
            FROM (SELECT 1) AS one
            LEFT JOIN (SELECT state, user_id, product_type FROM purchases WHERE store = $1 AND transaction_id = $2\(lock)) AS p ON true
            """, [.text(key.store.rawValue), .text(key.transactionId)]).first
        if let row, let state = row[0].string.flatMap(PurchaseState.init(rawValue:)) {
            return CurrentPurchase(state: state, userId: row[1].string, type: row[2].string.flatMap(ProductType.init(rawValue:)) ?? .unknown)
        }
        return CurrentPurchase(state: row?[3].int64 == 1 ? .revokedUnseen : .unseen, userId: nil, type: .unknown)
    }

    /// The shape of every state change: one transaction, the purchase as it is (locked), and what the lifecycle says
    /// `event` does to it; `body` applies that. `type` overrides the recorded type (a purchase being recorded has none).
    /// - Parameter deferring: `body` reads and changes no purchase but `key` (its writes of `key` may be deferred,
    ///   `StoreExecutor.write`); otherwise the batch's deferred writes are made first.
    func decide<T: Sendable>(_ key: PurchaseKey, on event: LifecycleEvent, type: ProductType? = nil, deferring: Bool = false,
                             _ body: @escaping @Sendable (any SQLConnection, CurrentPurchase, Transition) throws -> T) async throws -> T {
        let dialect = dialect
        let executor = executor
        return try await executor.run(usingReadAhead: true) { connection in
            if deferring { try executor.flushDeferred(of: key, connection) } else { try executor.flushDeferred(connection) }
            return try Self.transaction(connection, dialect) {
                // Read ahead by the batch (and locked then), once: a second decision on the key reads what the first left.
                let current = try executor.takeReadAhead(key).map { CurrentPurchase(state: $0.state, userId: $0.userId, type: $0.productType) }
                    ?? Self.current(connection, key, dialect)
                return try body(connection, current, Lifecycle.transition(from: current.state, on: event, type: type ?? current.type))
            }
        }
    }

    /// In a batch (`batch`): reads the records of `keys` (locking them on PostgreSQL, in key order) in one statement, so
    /// that the batch's first decision on each and its reads of the record skip their own statements. Only records: a
    /// row that does not exist cannot be locked, and "not recorded, no refund" trusted for the length of a batch would
    /// let another worker's record or refund of the purchase land meanwhile unseen; such keys are read when decided, as
    /// outside a batch. Outside a batch it does nothing: what it read would be stale at once.
    public func readAhead(_ keys: [PurchaseKey]) async throws {
        guard executor.inBatch, !keys.isEmpty else { return }
        let sorted = Set(keys).sorted { ($0.store.rawValue, $0.transactionId) < ($1.store.rawValue, $1.transactionId) }
        let dialect = dialect
        let lock = dialect == .postgres ? " FOR UPDATE" : ""
        let executor = executor
        try await executor.run(usingReadAhead: true) { connection in
            try executor.flushDeferred(connection)
            var found: [PurchaseKey: PurchaseRecord] = [:]
            try Self.inSet(sorted.map { [$0.store.rawValue, $0.transactionId] }, firstParameter: 1, dialect) { set, values in
                for row in try connection.query("""
                    SELECT \(Self.recordColumns) FROM purchases WHERE (store, transaction_id) IN (\(set)) ORDER BY store, transaction_id\(lock)
                    """, values) {
                    if let record = Self.record(row) { found[record.key] = record }
                }
            }
            executor.setReadAhead(found)
        }
    }

    /// Inserts the purchase record in `state` (nothing if it exists: the caller decided under the lock).
    static func insert(_ connection: any SQLConnection, _ purchase: PurchaseRecord, state: PurchaseState, reason: String?, at now: Date) throws {
        let timeColumn = timeColumn(recording: state)
        try connection.query("""
            INSERT INTO purchases (store, transaction_id, original_transaction_id, user_id, product_id, product_type, quantity, purchase_time, environment,
                                   state, reject_reason, \(timeColumn), package_name, purchase_token, store_consumed)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
            ON CONFLICT (store, transaction_id) DO NOTHING
            """, [.text(purchase.key.store.rawValue), .text(purchase.key.transactionId), purchase.originalTransactionId.map(SQLValue.text) ?? .null,
                  .text(purchase.userId), .text(purchase.productId), .text(purchase.productType.rawValue), .integer(Int64(purchase.quantity)),
                  .integer(PurchaseTime.milliseconds(purchase.purchaseTime)), purchase.environment.map(SQLValue.text) ?? .null,
                  .text(state.rawValue), reason.map(SQLValue.text) ?? .null, .integer(PurchaseTime.milliseconds(now)),
                  purchase.packageName.map(SQLValue.text) ?? .null, purchase.purchaseToken.map(SQLValue.text) ?? .null,
                  .integer(purchase.storeConsumed ? 1 : 0)])
    }

    static func setState(_ connection: any SQLConnection, _ key: PurchaseKey, _ state: PurchaseState, timeColumn: String, at now: Date) throws {
        try connection.query("UPDATE purchases SET state = $3, \(timeColumn) = $4 WHERE store = $1 AND transaction_id = $2",
                             [.text(key.store.rawValue), .text(key.transactionId), .text(state.rawValue), .integer(PurchaseTime.milliseconds(now))])
    }

    /// Ledger entries of kind `entry` (`grant` or `regrant`) for `items`, and the balances and entitlements they give.
    static func apply(_ items: [GrantItem], entry: String, _ connection: any SQLConnection, _ key: PurchaseKey, userId: String, at now: Date) throws -> Applied {
        let at = SQLValue.integer(PurchaseTime.milliseconds(now))
        var applied = Applied()
        for item in items {
            let expires = item.expiresAt.map { SQLValue.integer(PurchaseTime.milliseconds($0)) } ?? .null
            let row = try connection.query("""
                INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, expires_at, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id
                """, [.text(key.store.rawValue), .text(key.transactionId), .text(entry), .text(userId), .text(item.kind.rawValue), .text(item.code),
                      .integer(item.amount), expires, at])
            if let id = row.first?[0].int64 { applied.ledgerEntryIds.append(id) }
            switch item.kind {
            case .currency:
                let balance = try connection.query("""
                    INSERT INTO balances (user_id, currency, amount) VALUES ($1, $2, $3)
                    ON CONFLICT (user_id, currency) DO UPDATE SET amount = balances.amount + excluded.amount RETURNING amount
                    """, [.text(userId), .text(item.code), .integer(item.amount)])
                applied.balances[item.code] = balance.first?[0].int64
            case .entitlement:
                try giveEntitlement(connection, item, to: userId, from: key)
            }
        }
        return applied
    }

    /// What `apply` wrote: the ledger entries, and the user's balance of each currency it added to, after it.
    struct Applied {
        var ledgerEntryIds: [Int64] = []
        var balances: [String: Int64] = [:]
    }

    /// `userId` holds `item`'s entitlement through the purchase `key` (replacing what gave it before).
    static func giveEntitlement(_ connection: any SQLConnection, _ item: GrantItem, to userId: String, from key: PurchaseKey) throws {
        try connection.query("""
            INSERT INTO entitlements (user_id, entitlement, store, transaction_id, expires_at, active) VALUES ($1, $2, $3, $4, $5, 1)
            ON CONFLICT (user_id, entitlement) DO UPDATE SET store = excluded.store, transaction_id = excluded.transaction_id,
                expires_at = excluded.expires_at, active = 1
            """, [.text(userId), .text(item.code), .text(key.store.rawValue), .text(key.transactionId),
                  item.expiresAt.map { SQLValue.integer(PurchaseTime.milliseconds($0)) } ?? .null])
    }

    /// What a purchase grants now per item: its grants and re-grants less what was taken back (in full: a shortfall
    /// is what the user had spent, not what the purchase still gives).
    static func heldItems(_ connection: any SQLConnection, _ key: PurchaseKey) throws -> [GrantItem] {
        try connection.query("""
            SELECT item_kind, code, sum(amount), max(expires_at) FROM ledger
            WHERE store = $1 AND transaction_id = $2 AND entry_kind IN ('grant', 'regrant', 'revoke')
            GROUP BY item_kind, code HAVING sum(amount) > 0 ORDER BY item_kind, code
            """, [.text(key.store.rawValue), .text(key.transactionId)]).compactMap { row in
            guard let kind = row[0].string.flatMap(GrantItem.Kind.init(rawValue:)), let code = row[1].string, let amount = row[2].int64 else { return nil }
            return GrantItem(kind: kind, code: code, amount: amount, expiresAt: row[3].int64.map(PurchaseTime.date))
        }
    }

    static func ledgerItems(_ connection: any SQLConnection, _ key: PurchaseKey, kind: String) throws -> [GrantItem] {
        try connection.query("""
            SELECT item_kind, code, amount, expires_at FROM ledger WHERE store = $1 AND transaction_id = $2 AND entry_kind = $3 ORDER BY id
            """, [.text(key.store.rawValue), .text(key.transactionId), .text(kind)]).compactMap { row in
            guard let kind = row[0].string.flatMap(GrantItem.Kind.init(rawValue:)), let code = row[1].string, let amount = row[2].int64 else { return nil }
            return GrantItem(kind: kind, code: code, amount: amount, expiresAt: row[3].int64.map(PurchaseTime.date))
        }
    }

    /// Runs `body` with the SQL of a set of `tuples` (text values or NULL, each of as many) to put in `… IN (set)` or
    /// `FROM (set)`, and its parameters, numbered from `firstParameter`. A set must be looked up by the key's index
    /// whatever its values:
    /// - PostgreSQL: one `unnest` of an array per column, all tuples in one call. (A list of row values is planned as an
    ///   `OR` of them, which PostgreSQL answers by scanning every row of the store they share.)
    /// - SQLite: a `VALUES` list (a bare list of row values is answered by scanning the table), a plain list for one
    ///   column; in groups of up to 256 tuples, each padded to a power of two by repeating its last tuple, so that a
    ///   connection prepares a few statements, not one per batch size.
    static func inSet(_ tuples: [[String?]], firstParameter: Int, _ dialect: Migrations.Dialect,
                      _ body: (_ set: String, _ values: [SQLValue]) throws -> Void) throws {
        guard let arity = tuples.first?.count else { return }
        if dialect == .postgres {
            let arrays = (0..<arity).map { column in SQLValue.text(postgresArray(tuples.lazy.map { $0[column] })) }
            let columns = (0..<arity).map { "$\(firstParameter + $0)::text[]" }.joined(separator: ", ")
            return try body("SELECT * FROM unnest(\(columns))", arrays)
        }
        var start = 0
        while start < tuples.count {
            let group = tuples[start..<min(start + 256, tuples.count)]
            start += group.count
            var width = 1
            while width < group.count { width *= 2 }
            let rows = (0..<width).map { index in
                let parameters = (0..<arity).map { "$\(firstParameter + index * arity + $0)" }
                return arity == 1 ? parameters[0] : "(" + parameters.joined(separator: ", ") + ")"
            }.joined(separator: ", ")
            let columns = (1...arity).map { "column\($0)" }.joined(separator: ", ")
            let padding = Array(repeating: group[group.endIndex - 1], count: width - group.count)
            try body(arity == 1 ? rows : "SELECT \(columns) FROM (VALUES \(rows))", (group + padding).flatMap { $0.map { $0.map(SQLValue.text) ?? .null } })
        }
    }

    /// A PostgreSQL array literal of `elements` (each quoted, so any text is taken as it is; nil as NULL).
    static func postgresArray(_ elements: some Sequence<String?>) -> String {
        var literal = "{"
        for element in elements {
            if literal.utf8.count > 1 { literal += "," }
            guard let element else {
                literal += "NULL"
                continue
            }
            literal += "\""
            for character in element.unicodeScalars {
                if character == "\"" || character == "\\" { literal += "\\" }
                literal.unicodeScalars.append(character)
            }
            literal += "\""
        }
        return literal + "}"
    }

    /// A purchase record from the columns `recordColumns` selects, in that order.
    static let recordColumns = """
        store, transaction_id, user_id, product_id, product_type, quantity, purchase_time, state, environment, original_transaction_id,
        package_name, purchase_token, store_consumed
        """

    static func record(_ row: [SQLValue]) -> PurchaseRecord? {
        guard let store = row[0].string.flatMap(Store.init(rawValue:)), let id = row[1].string, let user = row[2].string, let product = row[3].string,
              let quantity = row[5].int64, let time = row[6].int64, let state = row[7].string.flatMap(PurchaseState.init(rawValue:)) else { return nil }
        return PurchaseRecord(key: PurchaseKey(store: store, transactionId: id), userId: user, productId: product,
                              productType: row[4].string.flatMap(ProductType.init(rawValue:)) ?? .unknown, quantity: Int(quantity),
                              purchaseTime: PurchaseTime.date(time), state: state, environment: row[8].string, originalTransactionId: row[9].string,
                              packageName: row[10].string, purchaseToken: row[11].string, storeConsumed: row[12].int64 == 1)
    }
}

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
        var userId: UserID?
        var type: ProductType
    }

    /// Where a purchase is in its lifecycle (locked for this transaction on PostgreSQL: its row, or the purchase
    /// itself when it has none, `lockKeys`): its record's state, else `revokedUnseen` for a tombstone, else `unseen`.
    static func current(_ connection: any SQLConnection, _ key: PurchaseKey, _ dialect: Migrations.Dialect) throws -> CurrentPurchase {
        let lock = dialect == .postgres ? " FOR UPDATE" : ""
        let values: [SQLValue] = [.text(key.store.rawValue), .text(key.transactionId)]
        /// The purchase of a row whose first columns are state, user and product type; nil for none (no record).
        func recorded(_ row: [SQLValue]?) -> CurrentPurchase? {
            guard let row, let state = row[0].string.flatMap(PurchaseState.init(rawValue:)) else { return nil }
            return CurrentPurchase(state: state, userId: row[1].identifier(), type: row[2].string.flatMap(ProductType.init(rawValue:)) ?? .unknown)
        }
        if dialect == .postgres {
            // A recorded purchase is locked by its row: no key lock (and no entry of PostgreSQL's lock table) needed.
            if let purchase = recorded(try connection.query(
                "SELECT state, user_id, product_type FROM purchases WHERE store = $1 AND transaction_id = $2 FOR UPDATE", values).first) {
                return purchase
            }
            try lockKeys(connection, [key], dialect)
        }
        // One statement: the record (if any: recorded meanwhile) and whether a refund came first; both locked.
        let row = try connection.query("""
            SELECT p.state, p.user_id, p.product_type,
                   EXISTS (SELECT 1 FROM tombstones WHERE store = $1 AND transaction_id = $2 AND reversed_at IS NULL\(lock))
            FROM (SELECT 1) AS one
            LEFT JOIN (SELECT state, user_id, product_type FROM purchases WHERE store = $1 AND transaction_id = $2\(lock)) AS p ON true
            """, values).first
        return recorded(row) ?? CurrentPurchase(state: row?[3].int64 == 1 ? .revokedUnseen : .unseen, userId: nil, type: .unknown)
    }

    /// PostgreSQL: locks each purchase of `keys` (in this order) for the rest of the transaction: every call that may
    /// record a purchase or its refund takes this lock when it finds no record, so that what a holder read of a purchase
    /// not recorded (no row to lock) stays true until it commits. Each lock held is an entry of PostgreSQL's shared lock
    /// table (`max_locks_per_transaction` × connections): taken for purchases without a record only (and by a consumption
    /// report that finds none to update: a repeat of one recorded, `recordConsumed`). SQLite needs none: a writer holds
    /// the whole database.
    static func lockKeys(_ connection: any SQLConnection, _ keys: [PurchaseKey], _ dialect: Migrations.Dialect) throws {
        guard dialect == .postgres, !keys.isEmpty else { return }
        if keys.count == 1, let key = keys.first {
            try connection.query("SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || $2, 0))", [.text(key.store.rawValue), .text(key.transactionId)])
            return
        }
        // unnest yields the keys in their order: the locks are taken in it.
        try connection.query("SELECT pg_advisory_xact_lock(hashtextextended(k.s || ':' || k.t, 0)) FROM unnest($1::text[], $2::text[]) AS k(s, t)",
                             [.text(postgresArray(keys.lazy.map { Optional($0.store.rawValue) })),
                              .text(postgresArray(keys.lazy.map { Optional($0.transactionId.rawValue) }))])
    }

    /// What a batch read ahead of a purchase (`readAhead`).
    enum ReadAheadPurchase: Sendable {
        case recorded(PurchaseRecord)
        /// No record; `refundedFirst`: its refund came first (a tombstone).
        case unrecorded(refundedFirst: Bool)

        var current: CurrentPurchase {
            switch self {
            case .recorded(let record): CurrentPurchase(state: record.state, userId: record.userId, type: record.productType)
            case .unrecorded(let refundedFirst): CurrentPurchase(state: refundedFirst ? .revokedUnseen : .unseen, userId: nil, type: .unknown)
            }
        }
    }

    /// The shape of every state change: one transaction, the purchase as it is (locked), and what the lifecycle says
    /// `event` does to it; `body` applies that. `type` overrides the recorded type (a purchase being recorded has none).
    /// - Parameter deferring: `body` reads and changes no purchase but `key` (its writes of `key` may be deferred,
    ///   `StoreExecutor.write`); otherwise the batch's deferred writes are made first.
    /// - Parameter body: given the executor whose connection it runs on, for its deferred writes: the store's `executor`
    ///   read again could name another connection (outside a batch, whichever is free at that moment).
    func decide<T: Sendable>(_ key: PurchaseKey, on event: LifecycleEvent, type: ProductType? = nil, deferring: Bool = false,
                             _ body: @escaping @Sendable (StoreExecutor, any SQLConnection, CurrentPurchase, Transition) throws -> T) async throws -> T {
        try await decide(key, on: { _, _ in event }, type: type, deferring: deferring, body)
    }

    /// `decide`, the event read off the purchase as it is (locked), in the same transaction: what the event means may
    /// depend on what the store holds of the purchase (a refund's reversal, on what the refund took back).
    func decide<T: Sendable>(_ key: PurchaseKey, on event: @escaping @Sendable (any SQLConnection, CurrentPurchase) throws -> LifecycleEvent,
                             type: ProductType? = nil, deferring: Bool = false,
                             _ body: @escaping @Sendable (StoreExecutor, any SQLConnection, CurrentPurchase, Transition) throws -> T) async throws -> T {
        let dialect = dialect
        let executor = executor
        return try await executor.run(usingReadAhead: true, inCallingTask: deferring) { connection in
            if deferring {
                try executor.flushDeferred(of: key, connection)
            } else {
                try executor.flushDeferredBeforeOtherWrites(connection) // `body` may change balances or write ledger entries itself.
            }
            return try Self.transaction(connection, dialect) {
                // Read ahead by the batch (and locked then), once: a second decision on the key reads what the first left.
                let current = try executor.takeReadAhead(key)?.current ?? Self.current(connection, key, dialect)
                return try body(executor, connection, current, Lifecycle.transition(from: current.state, on: try event(connection, current),
                                                                                    type: type ?? current.type))
            }
        }
    }

    /// In a batch (`batch`): reads what there is of the purchases `keys` (their records, else whether their refund came
    /// first) in a few statements for all, so that the batch's first decision on each and its reads of the record skip
    /// their own. They stay locked for the rest of the batch (PostgreSQL: the rows in key order, then `lockKeys` of those
    /// without one; SQLite: the batch holds the database), so what it read stays true: another worker that records one
    /// of them, or its refund, waits for the batch. Outside a batch it does nothing: what it read would be stale at once.
    /// - Parameter ownersBalances: also read (and lock) the balances of the owners of those verified, for the batch's grants
    ///   (`applyDeferring`).
    public func readAhead(_ keys: [PurchaseKey], ownersBalances: Bool = false) async throws {
        let executor = executor
        guard executor.inBatch, !keys.isEmpty else { return }
        let sorted = Set(keys).sorted { ($0.store.rawValue, $0.transactionId) < ($1.store.rawValue, $1.transactionId) }
        let dialect = dialect
        let lock = dialect == .postgres ? " FOR UPDATE" : ""
        try await executor.run(usingReadAhead: true) { connection in
            try executor.flushDeferred(connection)
            var found: [PurchaseKey: ReadAheadPurchase] = [:]
            // In key order, each locked as it is read (PostgreSQL): every batch locks in the same order.
            func readRecords(_ keys: [PurchaseKey]) throws {
                try Self.keyedRows("purchases", Self.recordColumns, of: keys, lock: lock, dialect) { source, values in
                    for row in try connection.query("SELECT r.* FROM \(source)", values) {
                        if let record = Self.record(row) { found[record.key] = .recorded(record) }
                    }
                }
            }
            try readRecords(sorted)
            if dialect == .postgres {
                // Those without a record: locked by key, then read again (another worker may have recorded one meanwhile).
                let unlocked = sorted.filter { found[$0] == nil }
                try Self.lockKeys(connection, unlocked, dialect)
                try readRecords(unlocked)
            }
            let unrecorded = sorted.filter { found[$0] == nil }
            var refundedFirst: Set<PurchaseKey> = []
            try Self.keyedRows("tombstones", "store, transaction_id, reversed_at", of: unrecorded, lock: lock, dialect) { source, values in
                for row in try connection.query("SELECT r.store, r.transaction_id FROM \(source) WHERE r.reversed_at IS NULL", values) {
                    if let store = row[0].string.flatMap(Store.init(rawValue:)), let id = row[1].identifier(TransactionID.self) {
                        refundedFirst.insert(PurchaseKey(store: store, transactionId: id))
                    }
                }
            }
            for key in unrecorded { found[key] = .unrecorded(refundedFirst: refundedFirst.contains(key)) }
            executor.setReadAhead(found)
            if ownersBalances {
                var owners: Set<UserID> = []
                for case .recorded(let record) in found.values
                    where Lifecycle.transition(from: record.state, on: .grant, type: record.productType).effects.contains(.grantItems) {
                    owners.insert(record.userId)
                }
                for (user, amounts) in try Self.readBalances(connection, of: Array(owners), lock: true, dialect) { executor.setBalances(amounts, of: user) }
            }
        }
    }

    /// Inserts the purchase record in `state` (nothing if it exists: the caller decided under the lock).
    static func insert(_ connection: any SQLConnection, _ purchase: PurchaseRecord, state: PurchaseState, reason: String?, at now: Date) throws {
        let timeColumn = timeColumn(recording: state)
        try connection.query("""
            INSERT INTO purchases (store, transaction_id, original_transaction_id, user_id, product_id, product_type, quantity, purchase_time, environment,
                                   state, reject_reason, \(timeColumn), package_name, purchase_token, store_consumed, expires_at, app_account_token,
                                   app, consumed_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, \(earlyConsumption(store: "$1", transactionId: "$2")))
            ON CONFLICT (store, transaction_id) DO NOTHING
            """, [.text(purchase.key.store.rawValue), .text(purchase.key.transactionId), purchase.originalTransactionId.map(SQLValue.text) ?? .null,
                  .text(purchase.userId), .text(purchase.productId), .text(purchase.productType.rawValue), .integer(Int64(purchase.quantity)),
                  .integer(PurchaseTime.milliseconds(purchase.purchaseTime)), purchase.environment.map(SQLValue.text) ?? .null,
                  .text(state.rawValue), reason.map(SQLValue.text) ?? .null, .integer(PurchaseTime.milliseconds(now)),
                  purchase.packageName.map(SQLValue.text) ?? .null, purchase.purchaseToken.map(SQLValue.text) ?? .null,
                  .integer(purchase.storeConsumed ? 1 : 0), purchase.expiresDate.map { SQLValue.integer(PurchaseTime.milliseconds($0)) } ?? .null,
                  purchase.appAccountToken.map(SQLValue.text) ?? .null, purchase.app.map(SQLValue.text) ?? .null])
    }

    /// Gives an unclaimed purchase the submitting user (and the account token the submission proved, if the charge named
    /// none), moving it to `state` as if it had been recorded now.
    static func claim(_ connection: any SQLConnection, _ purchase: PurchaseRecord, state: PurchaseState, at now: Date) throws {
        try connection.query("""
            UPDATE purchases SET user_id = $3, state = $4, verified_at = $5, app_account_token = COALESCE(app_account_token, $6)
            WHERE store = $1 AND transaction_id = $2
            """, [.text(purchase.key.store.rawValue), .text(purchase.key.transactionId), .text(purchase.userId), .text(state.rawValue),
                  .integer(PurchaseTime.milliseconds(now)), purchase.appAccountToken.map(SQLValue.text) ?? .null])
    }

    /// The app's consumption report of the purchase named by the two SQL expressions that came before its record
    /// (`recordConsumed`), or NULL: a purchase's record takes it in its insert. (The insert holds the purchase's lock,
    /// which `recordConsumed` takes too: no report falls between.)
    static func earlyConsumption(store: String, transactionId: TransactionID) -> String {
        "(SELECT e.consumed_at FROM early_consumption e WHERE e.store = \(store) AND e.transaction_id = \(transactionId))"
    }

    static func setState(_ connection: any SQLConnection, _ key: PurchaseKey, _ state: PurchaseState, timeColumn: String, at now: Date) throws {
        try connection.query("UPDATE purchases SET state = $3, \(timeColumn) = $4 WHERE store = $1 AND transaction_id = $2",
                             [.text(key.store.rawValue), .text(key.transactionId), .text(state.rawValue), .integer(PurchaseTime.milliseconds(now))])
    }

    /// Ledger entries of kind `entry` (`grant` or `regrant`) for `items`, and the balances and entitlements they give.
    /// - Throws: `BalanceOutOfRange` when a currency's balance would pass `CurrencyAmounts.balanceLimit`, with nothing
    ///   of `items` written (a refusal after an earlier item of them was written is a permanent `DatabaseError`).
    static func apply(_ items: [GrantItem], entry: String, _ connection: any SQLConnection, _ key: PurchaseKey, userId: UserID, at now: Date,
                      _ dialect: Migrations.Dialect) throws -> Applied {
        let at = SQLValue.integer(PurchaseTime.milliseconds(now))
        var applied = Applied()
        if let refusal = BalanceOutOfRange.first(of: items, adding: [:]) { throw refusal } // an amount no balance takes
        for item in items {
            let expires = item.expiresAt.map { SQLValue.integer(PurchaseTime.milliseconds($0)) } ?? .null
            let entryValues: [SQLValue] = [.text(key.store.rawValue), .text(key.transactionId), .text(entry), .text(userId), .text(item.kind.rawValue),
                                           .text(item.code), .integer(item.amount), expires, at]
            switch (item.kind, dialect) {
            case (.currency, .postgres):
                // One statement (a round trip and a plan fewer per grant): the entry and the balance it adds to, the entry
                // only when the balance took it.
                let row = try connection.query(Self.insertEntryAddingToBalance, entryValues).first
                guard let id = row?[0].int64, let balance = row?[1].int64 else {
                    throw try balanceRefused(connection, item, of: userId, afterWriting: !applied.ledgerEntryIds.isEmpty)
                }
                applied.ledgerEntryIds.append(id)
                applied.balances[item.code] = balance
            case (.currency, .sqlite):
                // The balance first: refused, nothing of the item is written.
                guard let balance = try connection.query(Self.addToBalanceAlone, [.text(userId), .text(item.code), .integer(item.amount)]).first?[0].int64 else {
                    throw try balanceRefused(connection, item, of: userId, afterWriting: !applied.ledgerEntryIds.isEmpty)
                }
                if let id = try connection.query(Self.insertEntry, entryValues).first?[0].int64 { applied.ledgerEntryIds.append(id) }
                applied.balances[item.code] = balance
            case (.entitlement, _):
                if let id = try connection.query(Self.insertEntry, entryValues).first?[0].int64 { applied.ledgerEntryIds.append(id) }
                try giveEntitlement(connection, item, to: userId, from: key)
            }
        }
        return applied
    }

    /// A ledger entry from `apply`'s nine values, answering its id.
    static let insertEntry = """
        INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, expires_at, created_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id
        """

    /// What `apply` wrote: the ledger entries, and the user's balance of each currency it added to, after it.
    struct Applied {
        var ledgerEntryIds: [Int64] = []
        var balances: [ItemCode: Int64] = [:]
    }

    /// `userId` holds `item`'s entitlement through the purchase `key`, beside what other purchases give of it (a row each,
    /// migration 10: reads take the latest expiry of those in force).
    static func giveEntitlement(_ connection: any SQLConnection, _ item: GrantItem, to userId: UserID, from key: PurchaseKey) throws {
        try giveEntitlement(connection, item, to: userId, source: [.text(key.store.rawValue), .text(key.transactionId)])
    }

    /// The entitlement `item` given to `userId` by `source`, the `(store, transaction_id)` that gives it: a purchase's, or
    /// an adjustment's (`adjustmentSource`, its id).
    static func giveEntitlement(_ connection: any SQLConnection, _ item: GrantItem, to userId: UserID, source: [SQLValue]) throws {
        try connection.query("""
            INSERT INTO entitlements (user_id, entitlement, store, transaction_id, expires_at, active) VALUES ($1, $2, $3, $4, $5, 1)
            ON CONFLICT (user_id, entitlement, store, transaction_id) DO UPDATE SET expires_at = excluded.expires_at, active = 1
            """, [.text(userId), .text(item.code)] + source + [item.expiresAt.map { SQLValue.integer(PurchaseTime.milliseconds($0)) } ?? .null])
    }

    /// What a purchase grants now per item: its grants and re-grants less what was taken back (in full: a shortfall
    /// is what the user had spent, not what the purchase still gives).
    static func heldItems(_ connection: any SQLConnection, _ key: PurchaseKey) throws -> [GrantItem] {
        try withCurrentExpiry(try connection.query("""
            SELECT item_kind, code, sum(amount), max(expires_at) FROM ledger
            WHERE store = $1 AND transaction_id = $2 AND entry_kind IN ('grant', 'regrant', 'revoke')
            GROUP BY item_kind, code HAVING sum(amount) > 0 ORDER BY item_kind, code
            """, [.text(key.store.rawValue), .text(key.transactionId)]).compactMap(grantItem), connection, key)
    }

    /// A ledger item from `item_kind, code, amount, expires_at` (an amount summed or not).
    static func grantItem(_ row: [SQLValue]) -> GrantItem? {
        guard let kind = row[0].string.flatMap(GrantItem.Kind.init(rawValue:)), let code = row[1].identifier(ItemCode.self), let amount = row[2].int64 else { return nil }
        return GrantItem(kind: kind, code: code, amount: amount, expiresAt: row[3].int64.map(PurchaseTime.date))
    }

    static func ledgerItems(_ connection: any SQLConnection, _ key: PurchaseKey, kind: String) throws -> [GrantItem] {
        try connection.query("""
            SELECT item_kind, code, amount, expires_at FROM ledger WHERE store = $1 AND transaction_id = $2 AND entry_kind = $3 ORDER BY id
            """, [.text(key.store.rawValue), .text(key.transactionId), .text(kind)]).compactMap(grantItem)
    }

    /// Runs `body` with a FROM item, `r`, of the rows of `table` (its `columns`, with `lock` appended to the row lookup) whose
    /// purchase is one of `keys`, and its parameters, numbered from 1; once per group of keys. Each key is looked up by
    /// the key's index whatever the plan: PostgreSQL, one probe per key (`LATERAL … LIMIT 1`; an `= ANY` index scan ran
    /// ten times slower per key under the benchmark's writes, and an `IN (SELECT … unnest …)` may be hash-joined to a
    /// scan of the whole table); SQLite, `matching`.
    static func keyedRows(_ table: String, _ columns: String, of keys: [PurchaseKey], lock: String = "", _ dialect: Migrations.Dialect,
                          _ body: (_ source: String, _ values: [SQLValue]) throws -> Void) throws {
        guard !keys.isEmpty else { return }
        guard dialect == .postgres else {
            return try matching(["store", "transaction_id"], keys.map { [$0.store.rawValue, $0.transactionId.rawValue] }, firstParameter: 1, dialect) {
                condition, values in try body("(SELECT \(columns) FROM \(table) WHERE \(condition)) AS r", values)
            }
        }
        try body("""
            unnest($1::text[], $2::text[]) AS k(store, transaction_id)
            CROSS JOIN LATERAL (SELECT \(columns) FROM \(table) WHERE store = k.store AND transaction_id = k.transaction_id LIMIT 1\(lock)) AS r
            """, [.text(postgresArray(keys.lazy.map { Optional($0.store.rawValue) })), .text(postgresArray(keys.lazy.map { Optional($0.transactionId.rawValue) }))])
    }

    /// Runs `body` with a condition that holds for the rows whose `columns` have the values of one of `tuples`, and its
    /// parameters, numbered from `firstParameter`; once per group of tuples. It finds them by an index on `columns`
    /// whatever the plan (PostgreSQL may hash-join an `IN (SELECT … unnest …)` to a scan of the whole table, as it did
    /// for the finisher's lookups in the benchmark; a generic plan, made without the values, does so on a small table):
    /// - PostgreSQL: the last column `= ANY` of an array, the others equal to one value each: the tuples are grouped by
    ///   their leading values, in their order.
    /// - SQLite: `IN` the set of them (`inSet`).
    static func matching(_ columns: [String], _ tuples: [[String]], firstParameter: Int, _ dialect: Migrations.Dialect,
                         _ body: (_ condition: String, _ values: [SQLValue]) throws -> Void) throws {
        guard let last = columns.last, !tuples.isEmpty else { return }
        guard dialect == .postgres else {
            let list = columns.count == 1 ? last : "(" + columns.joined(separator: ", ") + ")"
            return try inSet(tuples.map { $0.map { Optional($0) } }, firstParameter: firstParameter, dialect) { set, values in
                try body("\(list) IN (\(set))", values)
            }
        }
        let leading = columns.dropLast()
        // The last column's values by the leading ones, grouped as `Identifier`s: by their bytes, as the database compares them.
        var groups: [[Identifier<SQLValue>]: [String]] = [:]
        var order: [[Identifier<SQLValue>]] = []
        for tuple in tuples {
            let head = tuple.dropLast().map { Identifier<SQLValue>($0) }
            if groups[head] == nil { order.append(head) }
            groups[head, default: []].append(tuple[tuple.count - 1])
        }
        for head in order {
            var condition = ""
            for (index, column) in leading.enumerated() { condition += "\(column) = $\(firstParameter + index) AND " }
            condition += "\(last) = ANY($\(firstParameter + leading.count)::text[])"
            try body(condition, head.map(SQLValue.text) + [.text(postgresArray((groups[head] ?? []).lazy.map { Optional($0) }))])
        }
    }

    /// Runs `body` with the SQL of a set of `tuples` (text values or NULL, each of as many) to put in `FROM (set)` or
    /// `… IN (set)`, and its parameters, numbered from `firstParameter` (look rows up with `matching`, which uses it on
    /// SQLite). A set must be looked up by the key's index whatever its values:
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
        // On UTF-8 bytes: `"` and `\` are ASCII, never part of another character's encoding.
        var literal: [UInt8] = [UInt8(ascii: "{")]
        for element in elements {
            if literal.count > 1 { literal.append(UInt8(ascii: ",")) }
            guard let element else {
                literal.append(contentsOf: "NULL".utf8)
                continue
            }
            literal.append(UInt8(ascii: "\""))
            for byte in element.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { literal.append(UInt8(ascii: "\\")) }
                literal.append(byte)
            }
            literal.append(UInt8(ascii: "\""))
        }
        literal.append(UInt8(ascii: "}"))
        return String(decoding: literal, as: UTF8.self)
    }

    /// A purchase record from the columns `recordColumns` selects, in that order.
    static let recordColumns = """
        store, transaction_id, user_id, product_id, product_type, quantity, purchase_time, state, environment, original_transaction_id,
        package_name, purchase_token, store_consumed, expires_at, app_account_token, app
        """

    static func record(_ row: [SQLValue]) -> PurchaseRecord? {
        guard let store = row[0].string.flatMap(Store.init(rawValue:)), let id = row[1].identifier(TransactionID.self), let user = row[2].identifier(UserID.self),
              let product = row[3].identifier(ProductID.self),
              let quantity = row[5].int64, let time = row[6].int64, let state = row[7].string.flatMap(PurchaseState.init(rawValue:)) else { return nil }
        return PurchaseRecord(key: PurchaseKey(store: store, transactionId: id), userId: user, productId: product,
                              productType: row[4].string.flatMap(ProductType.init(rawValue:)) ?? .unknown, quantity: Int(quantity),
                              purchaseTime: PurchaseTime.date(time), state: state, environment: row[8].string, originalTransactionId: row[9].identifier(),
                              packageName: row[10].identifier(), purchaseToken: row[11].identifier(), storeConsumed: row[12].int64 == 1,
                              expiresDate: row[13].int64.map(PurchaseTime.date), appAccountToken: row[14].identifier(), app: row[15].identifier())
    }
}

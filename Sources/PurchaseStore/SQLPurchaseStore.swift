import Database
import Foundation

/// The purchase store on SQLite (embedded default; WAL, safe for several processes on one file) or
/// PostgreSQL (production). One implementation over both engines: the SQL is the same but for the
/// locking clauses, and both pass the same conformance suite.
///
/// Every effect is keyed by (store, transaction id) and happens in one database transaction, so a
/// repeated call answers from the stored state and changes nothing.
public final class SQLPurchaseStore: Sendable {
    let executor: StoreExecutor
    private let dialect: Migrations.Dialect
    /// A human-readable location for logs, without credentials.
    public let location: String

    /// Opens `url`: `sqlite:PATH` (or a path ending in `.sqlite`/`.db`) or `postgres://…`/`postgresql://…`;
    /// `password` (PostgreSQL) is given apart from the URL, e.g. read from a secret file.
    public init(url: String, password: String? = nil) throws {
        if url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") {
            dialect = .postgres
            location = Self.redacted(url)
            executor = StoreExecutor(label: "purchase-store.postgres") { try PostgresConnection(url: url, password: password) }
        } else if url.hasPrefix("sqlite:") || url.hasSuffix(".sqlite") || url.hasSuffix(".db") {
            let path = url.hasPrefix("sqlite:") ? String(url.dropFirst("sqlite:".count)) : url
            guard !path.isEmpty else { throw DatabaseError(code: "config", message: "sqlite: needs a file path", isRetriable: false) }
            dialect = .sqlite
            location = "sqlite:\(path)"
            executor = StoreExecutor(label: "purchase-store.sqlite") { try SQLiteConnection(path: path) }
        } else {
            throw DatabaseError(code: "config", message: "store URL must start with sqlite: or postgres://", isRetriable: false)
        }
    }

    /// Applies missing migrations; returns the versions applied now.
    @discardableResult
    public func migrate() async throws -> [Int] {
        let dialect = dialect
        return try await executor.run { try Migrations.apply($0, dialect: dialect) }
    }

    /// Records a verified purchase; a purchase already recorded is left as it is.
    public func recordVerified(_ purchase: PurchaseRecord, at now: Date) async throws -> RecordOutcome {
        try await record(purchase, state: .verified, reason: nil, at: now)
    }

    /// Records a rejected purchase for audit (when its transaction id is known).
    public func recordRejected(_ purchase: PurchaseRecord, reason: String, at now: Date) async throws -> RecordOutcome {
        try await record(purchase, state: .rejected, reason: reason, at: now)
    }

    private func record(_ purchase: PurchaseRecord, state: PurchaseState, reason: String?, at now: Date) async throws -> RecordOutcome {
        let timeColumn = state == .rejected ? "rejected_at" : "verified_at"
        return try await executor.run { connection in
            try connection.query("""
                INSERT INTO purchases (store, transaction_id, user_id, product_id, quantity, purchase_time, environment, state, reject_reason,
                                       \(timeColumn), package_name, purchase_token, store_consumed)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                ON CONFLICT (store, transaction_id) DO NOTHING
                """, [.text(purchase.key.store), .text(purchase.key.transactionId), .text(purchase.userId), .text(purchase.productId),
                      .integer(Int64(purchase.quantity)), .integer(PurchaseTime.milliseconds(purchase.purchaseTime)),
                      purchase.environment.map(SQLValue.text) ?? .null, .text(state.rawValue), reason.map(SQLValue.text) ?? .null,
                      .integer(PurchaseTime.milliseconds(now)), purchase.packageName.map(SQLValue.text) ?? .null,
                      purchase.purchaseToken.map(SQLValue.text) ?? .null, .integer(purchase.storeConsumed ? 1 : 0)])
            if connection.changes == 1 { return .recorded }
            let row = try connection.query("SELECT state, user_id FROM purchases WHERE store = $1 AND transaction_id = $2",
                                           [.text(purchase.key.store), .text(purchase.key.transactionId)])
            guard let state = row.first?[0].string.flatMap(PurchaseState.init(rawValue:)), let user = row.first?[1].string else {
                throw DatabaseError(code: "state", message: "purchase \(purchase.key) vanished", isRetriable: true)
            }
            return .existing(state: state, userId: user)
        }
    }

    /// Grants `items` for a verified purchase in one transaction: ledger entries, balances, entitlements,
    /// state `granted`. A purchase granted before answers `alreadyGranted` with the original items.
    public func grant(_ key: PurchaseKey, items: [GrantItem], at now: Date) async throws -> GrantOutcome {
        let dialect = dialect
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                guard let (state, userId) = try Self.lockedState(connection, key, dialect) else { return .notGrantable(state: nil) }
                switch state {
                case .granted, .finished:
                    return .alreadyGranted(items: try Self.ledgerItems(connection, key, kind: "grant"))
                case .verified:
                    break
                default:
                    return .notGrantable(state: state)
                }
                let at = SQLValue.integer(PurchaseTime.milliseconds(now))
                var ids: [Int64] = []
                for item in items {
                    let expires = item.expiresAt.map { SQLValue.integer(PurchaseTime.milliseconds($0)) } ?? .null
                    let row = try connection.query("""
                        INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, expires_at, created_at)
                        VALUES ($1, $2, 'grant', $3, $4, $5, $6, $7, $8) RETURNING id
                        """, [.text(key.store), .text(key.transactionId), .text(userId), .text(item.kind.rawValue), .text(item.code),
                              .integer(item.amount), expires, at])
                    if let id = row.first?[0].int64 { ids.append(id) }
                    switch item.kind {
                    case .currency:
                        try connection.query("""
                            INSERT INTO balances (user_id, currency, amount) VALUES ($1, $2, $3)
                            ON CONFLICT (user_id, currency) DO UPDATE SET amount = balances.amount + excluded.amount
                            """, [.text(userId), .text(item.code), .integer(item.amount)])
                    case .entitlement:
                        try connection.query("""
                            INSERT INTO entitlements (user_id, entitlement, store, transaction_id, expires_at, active) VALUES ($1, $2, $3, $4, $5, 1)
                            ON CONFLICT (user_id, entitlement) DO UPDATE SET store = excluded.store, transaction_id = excluded.transaction_id,
                                expires_at = excluded.expires_at, active = 1
                            """, [.text(userId), .text(item.code), .text(key.store), .text(key.transactionId), expires])
                    }
                }
                try connection.query("UPDATE purchases SET state = 'granted', granted_at = $3 WHERE store = $1 AND transaction_id = $2",
                                     [.text(key.store), .text(key.transactionId), at])
                return .granted(ledgerEntryIds: ids)
            }
        }
    }

    /// Marks a granted purchase finished. Never finishes one that was not granted.
    public func finish(_ key: PurchaseKey, at now: Date) async throws -> FinishOutcome {
        try await executor.run { connection in
            try connection.query("UPDATE purchases SET state = 'finished', finished_at = $3 WHERE store = $1 AND transaction_id = $2 AND state = 'granted'",
                                 [.text(key.store), .text(key.transactionId), .integer(PurchaseTime.milliseconds(now))])
            if connection.changes == 1 { return .finished }
            let row = try connection.query("SELECT state FROM purchases WHERE store = $1 AND transaction_id = $2",
                                           [.text(key.store), .text(key.transactionId)])
            let state = row.first?[0].string.flatMap(PurchaseState.init(rawValue:))
            return state == .finished ? .alreadyFinished : .notGranted(state: state)
        }
    }

    /// Reverses a purchase's grants (refund, revocation, or a due refund being clawed back). A balance
    /// never goes negative: what was already spent is recorded as the shortfall and reported.
    public func revoke(_ key: PurchaseKey, at now: Date) async throws -> RevokeOutcome {
        let dialect = dialect
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                guard let (state, userId) = try Self.lockedState(connection, key, dialect) else { return .unknownPurchase }
                if state == .revoked { return .alreadyRevoked }
                let at = SQLValue.integer(PurchaseTime.milliseconds(now))
                var shortfall: [String: Int64] = [:]
                for item in try Self.ledgerItems(connection, key, kind: "grant") {
                    var missing: Int64 = 0
                    switch item.kind {
                    case .currency:
                        let balance = try connection.query("SELECT amount FROM balances WHERE user_id = $1 AND currency = $2",
                                                           [.text(userId), .text(item.code)]).first?[0].int64 ?? 0
                        let taken = min(balance, item.amount)
                        missing = item.amount - taken
                        try connection.query("UPDATE balances SET amount = amount - $3 WHERE user_id = $1 AND currency = $2",
                                             [.text(userId), .text(item.code), .integer(taken)])
                        if missing > 0 { shortfall[item.code, default: 0] += missing }
                    case .entitlement:
                        try connection.query("UPDATE entitlements SET active = 0 WHERE user_id = $1 AND entitlement = $2 AND store = $3 AND transaction_id = $4",
                                             [.text(userId), .text(item.code), .text(key.store), .text(key.transactionId)])
                    }
                    try connection.query("""
                        INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, shortfall, created_at)
                        VALUES ($1, $2, 'revoke', $3, $4, $5, $6, $7, $8)
                        """, [.text(key.store), .text(key.transactionId), .text(userId), .text(item.kind.rawValue), .text(item.code),
                              .integer(-item.amount), .integer(missing), at])
                }
                try connection.query("UPDATE purchases SET state = 'revoked', revoked_at = $3 WHERE store = $1 AND transaction_id = $2",
                                     [.text(key.store), .text(key.transactionId), at])
                return .revoked(shortfall: shortfall)
            }
        }
    }

    /// Flags purchases of `store` paid but not finished, purchased before `now - deadline`, as `refund_due`;
    /// returns those this call flagged. Several sweepers at once flag each purchase exactly once: the
    /// state change is conditional, and PostgreSQL skips rows another sweeper holds.
    public func sweepDue(store: String, deadline: TimeInterval, now: Date, limit: Int = 500,
                         excluding excluded: Set<PurchaseKey> = []) async throws -> [DuePurchase] {
        let dialect = dialect
        let cutoff = now.addingTimeInterval(-deadline)
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                let skipLocked = dialect == .postgres ? " FOR UPDATE SKIP LOCKED" : ""
                let rows = try connection.query("""
                    SELECT transaction_id, user_id, product_id, quantity, purchase_time, state, environment FROM purchases
                    WHERE store = $1 AND state IN ('verified', 'granted') AND purchase_time < $2
                    ORDER BY purchase_time LIMIT $3\(skipLocked)
                    """, [.text(store), .integer(PurchaseTime.milliseconds(cutoff)), .integer(Int64(limit))])
                var due: [DuePurchase] = []
                for row in rows {
                    guard let id = row[0].string, let user = row[1].string, let product = row[2].string, let quantity = row[3].int64,
                          let time = row[4].int64, let state = row[5].string.flatMap(PurchaseState.init(rawValue:)),
                          !excluded.contains(PurchaseKey(store: store, transactionId: id)) else { continue }
                    try connection.query("""
                        UPDATE purchases SET state = 'refund_due', refund_due_at = $3
                        WHERE store = $1 AND transaction_id = $2 AND state IN ('verified', 'granted')
                        """, [.text(store), .text(id), .integer(PurchaseTime.milliseconds(now))])
                    guard connection.changes == 1 else { continue }
                    let record = PurchaseRecord(key: PurchaseKey(store: store, transactionId: id), userId: user, productId: product,
                                                quantity: Int(quantity), purchaseTime: PurchaseTime.date(time), state: .refundDue,
                                                environment: row[6].string)
                    due.append(DuePurchase(record: record, previousState: state, deadline: PurchaseTime.date(time).addingTimeInterval(deadline)))
                }
                return due
            }
        }
    }

    /// Granted purchases of `store` past `now - deadline` that carry a token to ask the store about again.
    public func dueGrantedWithToken(store: String, deadline: TimeInterval, now: Date, limit: Int = 500) async throws -> [PurchaseRecord] {
        let cutoff = PurchaseTime.milliseconds(now.addingTimeInterval(-deadline))
        return try await executor.run { connection in
            try connection.query("""
                SELECT transaction_id, user_id, product_id, quantity, purchase_time, package_name, purchase_token FROM purchases
                WHERE store = $1 AND state = 'granted' AND purchase_time < $2 AND purchase_token IS NOT NULL ORDER BY purchase_time LIMIT $3
                """, [.text(store), .integer(cutoff), .integer(Int64(limit))]).compactMap { row in
                guard let id = row[0].string, let user = row[1].string, let product = row[2].string, let quantity = row[3].int64,
                      let time = row[4].int64 else { return nil }
                return PurchaseRecord(key: PurchaseKey(store: store, transactionId: id), userId: user, productId: product, quantity: Int(quantity),
                                      purchaseTime: PurchaseTime.date(time), state: .granted, packageName: row[5].string, purchaseToken: row[6].string)
            }
        }
    }

    /// Purchases flagged `refund_due` whose `refund.due` event is not recorded as sent (the outbox).
    public func unsentRefundNotices(store: String, deadline: TimeInterval, limit: Int = 500) async throws -> [DuePurchase] {
        try await executor.run { connection in
            try connection.query("""
                SELECT transaction_id, user_id, product_id, quantity, purchase_time, environment FROM purchases
                WHERE store = $1 AND state = 'refund_due' AND refund_notified_at IS NULL ORDER BY purchase_time LIMIT $2
                """, [.text(store), .integer(Int64(limit))]).compactMap { row in
                guard let id = row[0].string, let user = row[1].string, let product = row[2].string, let quantity = row[3].int64,
                      let time = row[4].int64 else { return nil }
                let record = PurchaseRecord(key: PurchaseKey(store: store, transactionId: id), userId: user, productId: product,
                                            quantity: Int(quantity), purchaseTime: PurchaseTime.date(time), state: .refundDue, environment: row[5].string)
                return DuePurchase(record: record, previousState: .refundDue, deadline: PurchaseTime.date(time).addingTimeInterval(deadline))
            }
        }
    }

    /// Records that the `refund.due` events of these purchases were acknowledged by the broker.
    public func markRefundNoticesSent(_ keys: [PurchaseKey], at now: Date) async throws {
        try await executor.run { connection in
            for key in keys {
                try connection.query("UPDATE purchases SET refund_notified_at = $3 WHERE store = $1 AND transaction_id = $2",
                                     [.text(key.store), .text(key.transactionId), .integer(PurchaseTime.milliseconds(now))])
            }
        }
    }

    public func purchase(_ key: PurchaseKey) async throws -> PurchaseRecord? {
        try await executor.run { connection in
            let rows = try connection.query("""
                SELECT user_id, product_id, quantity, purchase_time, state, environment, package_name, purchase_token, store_consumed
                FROM purchases WHERE store = $1 AND transaction_id = $2
                """, [.text(key.store), .text(key.transactionId)])
            guard let row = rows.first, let user = row[0].string, let product = row[1].string, let quantity = row[2].int64,
                  let time = row[3].int64, let state = row[4].string.flatMap(PurchaseState.init(rawValue:)) else { return nil }
            return PurchaseRecord(key: key, userId: user, productId: product, quantity: Int(quantity), purchaseTime: PurchaseTime.date(time),
                                  state: state, environment: row[5].string, packageName: row[6].string, purchaseToken: row[7].string,
                                  storeConsumed: row[8].int64 == 1)
        }
    }

    /// A user's currency balances.
    public func balances(of userId: String) async throws -> [String: Int64] {
        try await executor.run { connection in
            var balances: [String: Int64] = [:]
            for row in try connection.query("SELECT currency, amount FROM balances WHERE user_id = $1", [.text(userId)]) {
                if let currency = row[0].string, let amount = row[1].int64 { balances[currency] = amount }
            }
            return balances
        }
    }

    /// A user's active entitlements and their expiry (nil: no expiry).
    public func entitlements(of userId: String) async throws -> [String: Date?] {
        try await executor.run { connection in
            var entitlements: [String: Date?] = [:]
            for row in try connection.query("SELECT entitlement, expires_at FROM entitlements WHERE user_id = $1 AND active = 1", [.text(userId)]) {
                // updateValue: assigning a nil expiry through the subscript would remove the entitlement.
                if let code = row[0].string { entitlements.updateValue(row[1].int64.map(PurchaseTime.date), forKey: code) }
            }
            return entitlements
        }
    }

    /// Succeeds when the database answers (readiness checks).
    public func ping() async throws {
        try await executor.run { connection in _ = try connection.query("SELECT 1") }
    }

    public func statistics() async throws -> StoreStatistics {
        try await executor.run { connection in
            var byState: [PurchaseState: Int] = [:]
            for row in try connection.query("SELECT state, count(*) FROM purchases GROUP BY state") {
                if let state = row[0].string.flatMap(PurchaseState.init(rawValue:)), let count = row[1].int64 { byState[state] = Int(count) }
            }
            let oldest = try connection.query("SELECT min(purchase_time) FROM purchases WHERE state IN ('verified', 'granted')").first?[0].int64
            return StoreStatistics(purchasesByState: byState, oldestUnfinishedPurchase: oldest.map(PurchaseTime.date))
        }
    }

    // MARK: - Helpers (run on the executor's queue)

    private static func transaction<T>(_ connection: any SQLConnection, _ dialect: Migrations.Dialect, _ body: () throws -> T) throws -> T {
        // SQLite: take the write lock up front, so that two processes cannot both read then write.
        try connection.query(dialect == .sqlite ? "BEGIN IMMEDIATE" : "BEGIN")
        do {
            let result = try body()
            try connection.query("COMMIT")
            return result
        } catch {
            _ = try? connection.query("ROLLBACK") // The original error is what matters.
            throw error
        }
    }

    /// The purchase's state and user, locked for this transaction on PostgreSQL.
    private static func lockedState(_ connection: any SQLConnection, _ key: PurchaseKey, _ dialect: Migrations.Dialect) throws -> (PurchaseState, String)? {
        let lock = dialect == .postgres ? " FOR UPDATE" : ""
        let row = try connection.query("SELECT state, user_id FROM purchases WHERE store = $1 AND transaction_id = $2\(lock)",
                                       [.text(key.store), .text(key.transactionId)]).first
        guard let state = row?[0].string.flatMap(PurchaseState.init(rawValue:)), let user = row?[1].string else { return nil }
        return (state, user)
    }

    private static func ledgerItems(_ connection: any SQLConnection, _ key: PurchaseKey, kind: String) throws -> [GrantItem] {
        try connection.query("""
            SELECT item_kind, code, amount, expires_at FROM ledger WHERE store = $1 AND transaction_id = $2 AND entry_kind = $3 ORDER BY id
            """, [.text(key.store), .text(key.transactionId), .text(kind)]).compactMap { row in
            guard let kind = row[0].string.flatMap(GrantItem.Kind.init(rawValue:)), let code = row[1].string, let amount = row[2].int64 else { return nil }
            return GrantItem(kind: kind, code: code, amount: amount, expiresAt: row[3].int64.map(PurchaseTime.date))
        }
    }

    private static func redacted(_ url: String) -> String {
        // postgres://user:secret@host/db → postgres://user:***@host/db
        guard let at = url.firstIndex(of: "@"), let schemeEnd = url.range(of: "://")?.upperBound,
              let colon = url[schemeEnd..<at].firstIndex(of: ":") else { return url }
        return String(url[..<url.index(after: colon)]) + "***" + String(url[at...])
    }
}

extension SQLPurchaseStore {
    /// The password in a secret file (as Kubernetes and Compose mount them), without a trailing newline.
    public static func password(fromFile path: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw DatabaseError(code: "config", message: "cannot read the password file \(path)", isRetriable: false)
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .newlines)
    }
}

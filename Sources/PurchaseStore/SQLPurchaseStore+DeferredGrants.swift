import Database
import Foundation
import PurchaseDomain

/// A grant's ledger entry whose write a batch deferred, with the balance the grant promised its user.
struct DeferredLedgerEntry: Sendable {
    let id: Int64
    let key: PurchaseKey
    let entry: String
    let userId: UserID
    let item: GrantItem
    let at: Date
    /// A currency's: the user's balance of `item.code` after this entry, as the grant reported it.
    let balanceAfter: Int64?
}

/// A user's balance of one currency (its code compared as bytes, as the database compares it).
struct BalanceKey: Hashable {
    let user: UserID
    let currency: ItemCode
}

/// A batch's grants, decided without a statement each for their ledger: an entry's id comes from ids the batch reserved, a
/// balance from what it read of the user (`readAhead(_:ownersBalances:)`), and the writes wait for the batch's flush, which
/// makes them all in two statements. (Every ledger entry of the batch until then is deferred: on SQLite, an entry written
/// at once would take a reserved id.)
extension SQLPurchaseStore {
    /// How many ledger entry ids a batch reserves at a time (PostgreSQL: those left unused at its end are skipped).
    static let reservedLedgerIds: Int64 = 64

    /// `apply` for a grant in a batch: the ledger entries and what they add to balances written by the flush, the
    /// entitlements at once.
    static func applyDeferring(_ items: [GrantItem], entry: String, _ connection: any SQLConnection, _ key: PurchaseKey, userId: UserID,
                               at now: Date, _ dialect: Migrations.Dialect, _ executor: StoreExecutor) throws -> Applied {
        guard executor.defersWrites else { return try apply(items, entry: entry, connection, key, userId: userId, at: now, dialect) }
        var balances: [ItemCode: Int64] = [:]
        if items.contains(where: { $0.kind == .currency }) {
            balances = try executor.balances(of: userId) ?? readBalances(connection, of: [userId], lock: false, dialect)[userId] ?? [:]
        }
        // Checked before anything is written (in memory or not): refused, the batch goes on without a trace of it.
        if let refusal = BalanceOutOfRange.first(of: items, adding: balances) { throw refusal }
        var applied = Applied()
        for item in items {
            let id: Int64
            if let reserved = executor.takeLedgerId() {
                id = reserved
            } else {
                let ids = try reserveLedgerIds(connection, dialect)
                executor.keepReservedLedgerIds(ids.dropFirst())
                id = ids.lowerBound
            }
            applied.ledgerEntryIds.append(id)
            var after: Int64?
            switch item.kind {
            case .currency:
                after = balances[item.code, default: 0] + item.amount // within the limit: checked above
                balances[item.code] = after
                applied.balances[item.code] = after
            case .entitlement:
                try giveEntitlement(connection, item, to: userId, from: key)
            }
            try executor.write(.ledgerEntry(DeferredLedgerEntry(id: id, key: key, entry: entry, userId: userId, item: item, at: now,
                                                                balanceAfter: after)), connection)
        }
        if !balances.isEmpty { executor.setBalances(balances, of: userId) }
        return applied
    }

    /// Every balance of `users` (a user without one is absent); PostgreSQL with `lock`: their rows locked, in user order.
    static func readBalances(_ connection: any SQLConnection, of users: [UserID], lock: Bool, _ dialect: Migrations.Dialect) throws -> [UserID: [ItemCode: Int64]] {
        var found: [UserID: [ItemCode: Int64]] = [:]
        for user in users { found[user] = [:] }
        let order = lock && dialect == .postgres ? " ORDER BY user_id, currency FOR UPDATE" : ""
        try matching(["user_id"], users.sorted().map { [$0.rawValue] }, firstParameter: 1, dialect) { condition, values in
            for row in try connection.query("SELECT user_id, currency, amount FROM balances WHERE \(condition)\(order)", values) {
                if let user = row[0].identifier(UserID.self), let currency = row[1].identifier(ItemCode.self), let amount = row[2].int64 { found[user, default: [:]][currency] = amount }
            }
        }
        return found
    }

    /// Ids for the next ledger entries, never given before: PostgreSQL's from the table's sequence; SQLite's after the
    /// highest given (the batch holds the database, and an entry written with its id moves SQLite's AUTOINCREMENT past it;
    /// the batch writes no other entry before it flushes these, see `StoreExecutor.flushDeferredBeforeOtherWrites`).
    static func reserveLedgerIds(_ connection: any SQLConnection, _ dialect: Migrations.Dialect) throws -> Range<Int64> {
        switch dialect {
        case .postgres:
            // The sequence is looked up once (a CTE kept apart), not per value: `pg_get_serial_sequence` is not folded
            // into a constant, and looking it up per row cost five times the `nextval`s themselves.
            let ids = try connection.query("""
                WITH s AS MATERIALIZED (SELECT pg_get_serial_sequence('ledger', 'id')::regclass AS sequence)
                SELECT nextval(s.sequence) FROM s, generate_series(1, $1)
                """, [.integer(reservedLedgerIds)]).compactMap { $0[0].int64 }
            // One call's values of a sequence are consecutive unless another session takes some meanwhile: keep the run.
            guard let first = ids.first else { throw DatabaseError(code: "XX000", message: "no ledger id reserved", isRetriable: true) }
            var end = first + 1
            for id in ids.dropFirst() where id == end { end += 1 }
            return first..<end
        case .sqlite:
            let last = try connection.query("""
                SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'ledger'), 0), coalesce((SELECT max(id) FROM ledger), 0))
                """).first?[0].int64 ?? 0
            // Every id above it, until the batch flushes its entries (then the next reservation reads past them).
            return (last + 1)..<Int64.max
        }
    }

    /// The rows of an `inSet` set once each: SQLite's repeat their last to a size prepared before (PostgreSQL's do not).
    private static func distinct(_ set: String, _ dialect: Migrations.Dialect) -> String {
        dialect == .sqlite ? "SELECT DISTINCT * FROM (\(set))" : set
    }

    /// Writes `entries` with their ids in one statement, and adds them to their users' balances in one more; a balance that
    /// does not end where the entries said (another transaction changed it since it was read) fails the batch, to be
    /// decided again.
    static func flushLedger(_ connection: any SQLConnection, _ entries: [DeferredLedgerEntry], _ dialect: Migrations.Dialect) throws {
        guard !entries.isEmpty else { return }
        let rows: [[String?]] = entries.map { entry in
            [String(entry.id), entry.key.store.rawValue, entry.key.transactionId.rawValue, entry.entry, entry.userId.rawValue, entry.item.kind.rawValue, entry.item.code.rawValue,
             String(entry.item.amount), entry.item.expiresAt.map { String(PurchaseTime.milliseconds($0)) }, String(PurchaseTime.milliseconds(entry.at))]
        }
        try inSet(rows, firstParameter: 1, dialect) { set, values in
            try connection.query("""
                INSERT INTO ledger (id, store, transaction_id, entry_kind, user_id, item_kind, code, amount, expires_at, created_at)
                SELECT CAST(column1 AS BIGINT), column2, column3, column4, column5, column6, column7, CAST(column8 AS BIGINT), CAST(column9 AS BIGINT),
                       CAST(column10 AS BIGINT)
                FROM (\(distinct(set, dialect))) AS \(rowsAlias(columns: 10, dialect))
                """, values)
        }
        // Per user and currency: what the entries add, and the balance the last of them promised.
        var added: [BalanceKey: (amount: Int64, after: Int64)] = [:]
        var order: [BalanceKey] = []
        for entry in entries {
            guard let after = entry.balanceAfter else { continue } // an entitlement's
            let balance = BalanceKey(user: entry.userId, currency: entry.item.code)
            if added[balance] == nil { order.append(balance) }
            added[balance] = ((added[balance]?.amount ?? 0) + entry.item.amount, after)
        }
        guard !order.isEmpty else { return }
        let sums = order.map { balance in [balance.user.rawValue, balance.currency.rawValue, String(added[balance]?.amount ?? 0)] as [String?] }
        try inSet(sums, firstParameter: 1, dialect) { set, values in
            // WHERE true: SQLite would otherwise read the upsert's ON CONFLICT as the join constraint of the SELECT.
            for row in try connection.query("""
                INSERT INTO balances (user_id, currency, amount)
                SELECT column1, column2, CAST(column3 AS BIGINT) FROM (\(distinct(set, dialect))) AS \(rowsAlias(columns: 3, dialect))
                WHERE true ON CONFLICT (user_id, currency) DO UPDATE SET amount = balances.amount + excluded.amount RETURNING user_id, currency, amount
                """, values) {
                guard let user = row[0].identifier(UserID.self), let currency = row[1].identifier(ItemCode.self),
                      let promised = added[BalanceKey(user: user, currency: currency)]?.after else { continue }
                if row[2].int64 != promised {
                    throw DatabaseError(code: "40001", message: "the balance of \(user) in \(currency) changed while a batch granted to it", isRetriable: true)
                }
            }
        }
    }
}

import Database
import Foundation
import PurchaseDomain

/// The purchase store on SQLite (embedded default; WAL, safe for several processes on one file) or
/// PostgreSQL (production). One implementation over both engines: the SQL is the same but for the
/// locking clauses, and both pass the same conformance suite.
///
/// Every effect is keyed by (store, transaction id) and happens in one database transaction, so a
/// repeated call answers from the stored state and changes nothing.
public final class SQLPurchaseStore: Sendable {
    let executors: StoreExecutorPool
    /// The connection the current call runs on: its batch's, else a free one (`StoreExecutorPool.current`). Read it once
    /// per call, in the calling task (`let executor = executor`), never on the executor's queue.
    var executor: StoreExecutor { executors.current }
    let dialect: Migrations.Dialect
    /// A human-readable location for logs, without credentials.
    public let location: String

    /// Opens `url`: `sqlite:PATH` (or a path ending in `.sqlite`/`.db`) or `postgres://…`/`postgresql://…`;
    /// `password` (PostgreSQL) is given apart from the URL, e.g. read from a secret file.
    /// - Parameter connections: PostgreSQL connections at most, each opened when calls first overlap that far (default
    ///   `defaultConnections`); SQLite always has one, as it has one writer at a time.
    /// - Parameter lockTimeout: PostgreSQL: how long a statement waits for a lock (`defaultLockTimeout`; zero: as long as
    ///   it takes, which risks the deadlock `defaultLockTimeout` tells of).
    public init(url: String, password: String? = nil, connections: Int = SQLPurchaseStore.defaultConnections,
                lockTimeout: Duration = SQLPurchaseStore.defaultLockTimeout) throws {
        let lockTimeoutMilliseconds = max(0, lockTimeout.components.seconds * 1000 + lockTimeout.components.attoseconds / 1_000_000_000_000_000)
        if url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") {
            dialect = .postgres
            location = Self.redacted(url)
            executors = StoreExecutorPool(count: connections) { index in
                StoreExecutor(label: "purchase-store.postgres.\(index)", open: {
                    let connection = try PostgresConnection(url: url, password: password)
                    try connection.executeScript("SET lock_timeout = '\(lockTimeoutMilliseconds)ms'")
                    return connection
                }, flush: { try Self.flush($0, $1, .postgres) })
            }
        } else if url.hasPrefix("sqlite:") || url.hasSuffix(".sqlite") || url.hasSuffix(".db") {
            let path = url.hasPrefix("sqlite:") ? String(url.dropFirst("sqlite:".count)) : url
            guard !path.isEmpty else { throw DatabaseError(code: "config", message: "sqlite: needs a file path", isRetriable: false) }
            dialect = .sqlite
            location = "sqlite:\(path)"
            executors = StoreExecutorPool(count: 1) { _ in
                StoreExecutor(label: "purchase-store.sqlite", open: { try SQLiteConnection(path: path) }, flush: { try Self.flush($0, $1, .sqlite) })
            }
        } else {
            throw DatabaseError(code: "config", message: "store URL must start with sqlite: or postgres://", isRetriable: false)
        }
    }

    /// How long a statement waits for a row lock before it fails (`55P03`, retried as transient: the batch rolls back and
    /// is tried again). SQL runs on the task pool's few threads, and a batch keeps its transaction open across its
    /// awaits: were the pool's threads all blocked on locks such a transaction holds, the batch holding them would never
    /// be resumed to commit. Lock waits between batches take milliseconds; a wait this long is that deadlock, or a
    /// transaction another process left stuck.
    public static let defaultLockTimeout: Duration = .seconds(5)

    /// PostgreSQL connections per store unless told otherwise: one per partition a worker is typically assigned.
    public static let defaultConnections = 4

    /// Applies missing migrations; returns the versions applied now.
    @discardableResult
    public func migrate() async throws -> [Int] {
        try await migrate(through: .max)
    }

    /// Applies missing migrations up to `last` (tests of a migration start from the schema before it).
    func migrate(through last: Int) async throws -> [Int] {
        let dialect = dialect
        return try await executor.run { try Migrations.apply($0, dialect: dialect, through: last) }
    }

    /// Records a verified purchase; a purchase already recorded is left as it is. One whose refund arrived first
    /// (a tombstone) is recorded `revoked` and answers `revokedEarlier`.
    public func recordVerified(_ purchase: PurchaseRecord, at now: Date) async throws -> RecordOutcome {
        return try await decide(purchase.key, on: .verified, type: purchase.productType, deferring: true) { executor, connection, current, transition in
            if transition.effects.contains(.claimPurchase) {
                try Self.claim(connection, purchase, state: transition.to, at: now)
                return .recorded
            }
            guard transition.effects.contains(.recordPurchase) else {
                return .existing(state: current.state, userId: current.userId ?? purchase.userId)
            }
            // Refused with a reason: its refund or revocation came first; it is recorded in the state the lifecycle says.
            let revokedEarlier = transition.reason == .revoked
            try executor.write(.insert(purchase, state: transition.to, reason: revokedEarlier ? "revokedEarlier" : nil, at: now), connection)
            return revokedEarlier ? .revokedEarlier : .recorded
        }
    }

    public func recordUnclaimed(_ purchase: PurchaseRecord, at now: Date) async throws -> RecordOutcome {
        let unowned = { var record = purchase; record.userId = .nobody; return record }()
        return try await decide(purchase.key, on: .chargeAnnounced, type: purchase.productType, deferring: true) { executor, connection, current, transition in
            guard transition.effects.contains(.recordPurchase) else { return .existing(state: current.state, userId: current.userId ?? .nobody) }
            let revokedEarlier = transition.reason == .revoked
            try executor.write(.insert(unowned, state: transition.to, reason: revokedEarlier ? "revokedEarlier" : nil, at: now), connection)
            return revokedEarlier ? .revokedEarlier : .recorded
        }
    }

    /// Records a rejected purchase for audit (`LifecycleEvent.verificationRefused`); what is recorded already, or a refund
    /// that came first, stands.
    public func recordRejected(_ purchase: PurchaseRecord, reason: String, at now: Date) async throws -> RecordOutcome {
        return try await decide(purchase.key, on: .verificationRefused, type: purchase.productType) { executor, connection, current, transition in
            guard transition.effects.contains(.recordPurchase) else {
                return .existing(state: current.state, userId: current.userId ?? purchase.userId)
            }
            try executor.write(.insert(purchase, state: transition.to, reason: reason, at: now), connection)
            return .recorded
        }
    }

    /// Grants `items` for a verified purchase in one transaction: ledger entries, balances, entitlements,
    /// state `granted`. A purchase granted before answers `alreadyGranted` with the original items.
    public func grant(_ key: PurchaseKey, items: [GrantItem], at now: Date) async throws -> GrantOutcome {
        return try await decide(key, on: .grant, deferring: true) { executor, connection, current, transition in
            switch transition.outcome {
            case .applied:
                let applied = try Self.applyDeferring(items, entry: "grant", connection, key, userId: current.userId ?? "", at: now, self.dialect, executor)
                let superseded = try Self.endingSupersededPeriods(current, items, connection, key, self.dialect)
                try executor.write(.setState(key, transition.to, timeColumn: "granted_at", at: now), connection)
                return .granted(ledgerEntryIds: applied.ledgerEntryIds, balances: applied.balances, endsBy: superseded.endsBy, ended: superseded.ended)
            case .repeated:
                // The balances as they are now, with what the batch's other grants added.
                try executor.flushDeferred(connection)
                // As granted, with the renewal date the store moved since (RENEWAL_EXTENDED).
                let period = current.type == .autoRenewable ? try Period(connection, key) : nil
                let original = try Self.withCurrentExpiry(try Self.ledgerItems(connection, key, kind: "grant"), connection, period)
                let balances = try Self.balances(connection, of: current.userId ?? "").filter { currency, _ in
                    original.contains { $0.kind == .currency && $0.code == currency }
                }
                // An upgrade: the periods it ended, answered again (its first answers may have been lost).
                let ended = try period.map { try Self.periodsEndedBy(connection, $0) } ?? []
                return .alreadyGranted(items: original, balances: balances, ended: ended)
            case .waiting, .refused, .ignored:
                return .notGrantable(state: current.state.isRecorded ? current.state : nil)
            }
        }
    }

    /// Marks a granted purchase finished. Never finishes one that was not granted.
    public func finish(_ key: PurchaseKey, at now: Date) async throws -> FinishOutcome {
        return try await decide(key, on: .finish, deferring: true) { executor, connection, current, transition in
            switch transition.outcome {
            case .applied:
                try executor.write(.setState(key, transition.to, timeColumn: "finished_at", at: now), connection)
                return .finished
            case .repeated: return .alreadyFinished
            case .waiting, .refused, .ignored: return .notGranted(state: current.state.isRecorded ? current.state : nil)
            }
        }
    }

    /// Names the product type of purchases recorded as `unknown` (rows from before types were kept) from the
    /// catalog's products of `store`; returns how many rows it named.
    @discardableResult
    public func assignProductTypes(_ types: [ProductID: ProductType], store: Store) async throws -> Int {
        let known = types.filter { $0.value != .unknown }
        guard !known.isEmpty else { return 0 }
        let dialect = dialect
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                var named = 0
                for (product, type) in known.sorted(by: { $0.key < $1.key }) {
                    try connection.query("UPDATE purchases SET product_type = $3 WHERE store = $1 AND product_id = $2 AND product_type = 'unknown'",
                                         [.text(store.rawValue), .text(product), .text(type.rawValue)])
                    named += connection.changes
                }
                return named
            }
        }
    }

    /// Succeeds when the database answers (readiness checks).
    public func ping() async throws {
        try await executor.run { connection in _ = try connection.query("SELECT 1") }
    }

    /// How durably the database commits, as it reports it: PostgreSQL's `fsync` and `synchronous_commit`, SQLite's
    /// `journal_mode` and `synchronous` (for benchmark reports, which mean little without it).
    public func durability() async throws -> [String: String] {
        let dialect = dialect
        return try await executor.run { connection in
            let settings = dialect == .postgres ? [("fsync", "SHOW fsync"), ("synchronous_commit", "SHOW synchronous_commit")]
                : [("journal_mode", "PRAGMA journal_mode"), ("synchronous", "PRAGMA synchronous")]
            var values: [String: String] = [:]
            for (name, query) in settings { values[name] = try connection.query(query).first?[0].string ?? "" }
            return values
        }
    }

    /// Every purchase by state and what `openStatistics` reads, on one connection: for the demo's books and tests. The count
    /// reads the whole table (see `purchaseCounts`).
    public func statistics() async throws -> StoreStatistics {
        try await executor.run { connection in
            let open = try Self.openStatistics(connection)
            let byState = try Self.purchaseCounts(connection).values.reduce(into: [PurchaseState: Int]()) { $0.merge($1, uniquingKeysWith: +) }
            return StoreStatistics(purchasesByState: byState, oldestUnfinishedPurchase: open.oldestUnfinishedPurchase,
                                   unknownProductType: open.unknownProductType)
        }
    }

    /// Every purchase by store, app and state: a count of the whole table, whose cost grows with it (a purchase is kept
    /// for good, to recognise its repeats): read it seldom. `openStatistics` stays cheap.
    public func purchaseCounts() async throws -> [StoreAndApp: [PurchaseState: Int]] {
        try await executor.run(Self.purchaseCounts)
    }

    /// What a scrape reads each time: purchases verified or granted by store, app and state with the oldest of them, the
    /// unclaimed charges, and the purchases of unknown product type, each from a partial index that holds only those
    /// rows: the cost follows the work in flight, not the purchases ever recorded.
    public func openStatistics() async throws -> OpenPurchaseStatistics {
        try await executor.run(Self.openStatistics)
    }

    public func openPurchases(store: Store, boughtBefore: Date) async throws -> [AppID?: Int] {
        try await executor.run { connection in
            var counts: [AppID?: Int] = [:]
            for row in try connection.query(Self.openPurchasesBoughtBeforeQuery, [.text(store.rawValue), .integer(PurchaseTime.milliseconds(boughtBefore))]) {
                counts[row[0].identifier(), default: 0] += Int(row[1].int64 ?? 0)
            }
            return counts
        }
    }

    // Conditions in both engines' words: SQLite's indexes of open purchases say `state IN (…)` (migration 7), PostgreSQL's `is_open`.
    static let openPurchasesQuery = "SELECT store, app, state, count(*), min(purchase_time) FROM purchases "
        + "WHERE is_open AND \(LifecycleConditions.state(in: Lifecycle.openStates)) GROUP BY store, app, state"
    static let unknownProductTypeQuery = "SELECT count(*) FROM purchases WHERE product_type = 'unknown'"
    /// Open purchases of a store ($1) bought before $2 (`purchases_open_by_time`).
    static let openPurchasesBoughtBeforeQuery = "SELECT app, count(*) FROM purchases WHERE is_open AND \(LifecycleConditions.state(in: Lifecycle.openStates)) "
        + "AND store = $1 AND purchase_time < $2 GROUP BY app"
    /// Charges nobody claimed, in both engines' words for their partial index (migration 18): PostgreSQL's `is_unclaimed`,
    /// SQLite's on `state`.
    static let unclaimedCondition = "is_unclaimed AND \(LifecycleConditions.state(in: [.unclaimed]))"
    static let unclaimedChargesQuery = "SELECT store, app, count(*), min(purchase_time) FROM purchases WHERE \(unclaimedCondition) GROUP BY store, app"
    /// The kept reports whose purchase is not recorded: the table holds few more (the sweeper prunes those taken).
    static let waitingConsumptionReportsQuery = """
        SELECT count(*) FROM early_consumption e WHERE NOT EXISTS (SELECT 1 FROM purchases p WHERE p.store = e.store AND p.transaction_id = e.transaction_id)
        """

    private static func purchaseCounts(_ connection: any SQLConnection) throws -> [StoreAndApp: [PurchaseState: Int]] {
        var counts: [StoreAndApp: [PurchaseState: Int]] = [:]
        for row in try connection.query("SELECT store, app, state, count(*) FROM purchases GROUP BY store, app, state") {
            guard let key = storeAndApp(row), let state = row[2].string.flatMap(PurchaseState.init(rawValue:)), let count = row[3].int64 else { continue }
            counts[key, default: [:]][state] = Int(count)
        }
        return counts
    }

    private static func openStatistics(_ connection: any SQLConnection) throws -> OpenPurchaseStatistics {
        var figures: [StoreAndApp: OpenPurchaseFigures] = [:]
        for row in try connection.query(openPurchasesQuery) {
            guard let key = storeAndApp(row), let state = row[2].string.flatMap(PurchaseState.init(rawValue:)), let count = row[3].int64 else { continue }
            figures[key, default: .init()].byState[state] = Int(count)
            if let oldest = row[4].int64.map(PurchaseTime.date) {
                figures[key, default: .init()].oldestUnfinished = min(oldest, figures[key]?.oldestUnfinished ?? oldest)
            }
        }
        for row in try connection.query(unclaimedChargesQuery) {
            guard let key = storeAndApp(row) else { continue }
            figures[key, default: .init()].unclaimedCharges = Int(row[2].int64 ?? 0)
            figures[key, default: .init()].oldestUnclaimed = row[3].int64.map(PurchaseTime.date)
        }
        let unknown = try connection.query(unknownProductTypeQuery).first?[0].int64 ?? 0
        let waiting = try connection.query(waitingConsumptionReportsQuery).first?[0].int64 ?? 0
        return OpenPurchaseStatistics(byStoreAndApp: figures, unknownProductType: Int(unknown), consumptionReportsWaiting: Int(waiting))
    }

    /// A row's store (column 0) and app (column 1).
    private static func storeAndApp(_ row: SQLRow) -> StoreAndApp? {
        row[0].string.flatMap(Store.init(rawValue:)).map { StoreAndApp(store: $0, app: row[1].identifier()) }
    }

    private static func redacted(_ url: String) -> String {
        // postgres://user:secret@host/db → postgres://user:***@host/db
        guard let at = url.firstIndex(of: "@"), let schemeEnd = url.range(of: "://")?.upperBound,
              let colon = url[schemeEnd..<at].firstIndex(of: ":") else { return url }
        return String(url[..<url.index(after: colon)]) + "***" + String(url[at...])
    }
}

extension SQLPurchaseStore {
    /// The newest schema version `migrate` brings a store to.
    public static var schemaVersion: Int { Migrations.latestVersion }
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

extension SQLPurchaseStore {
    /// Runs the store calls `body` makes in one database transaction, committed when it returns and rolled back when it
    /// throws: a stage's work for a batch of messages, e.g. each grant decided under its lock as alone, but one commit
    /// for all. Other callers of this store wait until the batch ended. A call made in a batch that fails (a database
    /// error) leaves the transaction unusable on PostgreSQL: let the error end the batch.
    public func batch<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await executor.batch(begin: dialect == .sqlite ? "BEGIN IMMEDIATE" : "BEGIN", body)
    }
}

extension SQLPurchaseStore: SweepRepository, ConsumptionRequestRepository {
    public func isTransient(_ error: any Error) -> Bool { (error as? DatabaseError)?.isRetriable == true }
}

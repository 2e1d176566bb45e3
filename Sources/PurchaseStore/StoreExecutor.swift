import Database
import Dispatch
import Foundation
import PurchaseDomain
import Synchronization

/// Owns one connection and runs every database call on its own serial queue, off Swift's cooperative
/// pool (the C calls block; a batch's calls answered from memory excepted, see `run(inCallingTask:)`). A connection
/// found lost is dropped and reopened on the next call.
///
/// A batch (`batch(begin:_:)`) holds the connection for one task across its awaits, in one transaction: calls from
/// other tasks wait at the gate until it ended, so that none of their statements falls into its transaction.
///
/// A batch also defers the purchase writes of its hot decisions (`write(_:_:)`): they are flushed in a few set-based
/// statements before anything else reads or changes purchases in it, and before its COMMIT.
///
/// A batch's grants defer their ledger entries too (`SQLPurchaseStore.applyDeferring`): each takes its entry's id from ids
/// the batch reserved (`ledgerIds`) and the user's balance after it from what the batch read of it (`balances`), so that the
/// event can be built at once; the flush writes the entries and adds to the balances, checking they end as promised.
///
/// `@unchecked Sendable`: `connection`, `batchOpen`, `readAhead`, `deferred`, `balances` and `ledgerIds` are only touched
/// on `queue` (also by `run(inCallingTask:)`, through `DispatchQueue.sync`); the gate is a `Mutex`.
final class StoreExecutor: @unchecked Sendable {
    private let queue: DispatchQueue
    private let open: @Sendable () throws -> any SQLConnection
    /// Writes `writes` on the connection, in order (`SQLPurchaseStore.flush`).
    private let flush: @Sendable (any SQLConnection, [DeferredWrite]) throws -> Void
    private var connection: (any SQLConnection)?
    /// A batch's transaction is open on `connection` (only touched on `queue`).
    private var batchOpen = false
    private let gate = Gate()
    /// The executor whose batch the current task runs.
    @TaskLocal private static var batchOf: ObjectIdentifier?
    /// What a batch read ahead of its purchases (`SQLPurchaseStore.readAhead`), by key. Only touched on `queue`; emptied
    /// when a batch begins or ends and by every call that does not use it (which may write purchases:
    /// `run(usingReadAhead:_:)`).
    private var readAhead: [PurchaseKey: SQLPurchaseStore.ReadAheadPurchase] = [:]
    /// The batch's purchase writes not made yet, at most one per key (each key's is flushed before it is read again), and
    /// their keys. Only touched on `queue`; emptied when a batch begins or ends.
    private var deferred: [DeferredWrite] = []
    private var deferredKeys: Set<PurchaseKey> = []
    /// Users' balances (every currency of each user read; absent: zero) as the batch's deferred writes leave them. Only
    /// touched on `queue`; forgotten with what was read ahead, when a batch begins or ends, and before anything that may
    /// change balances other than a deferred grant (`flushDeferredBeforeOtherWrites`).
    private var balances: [UserID: [ItemCode: Int64]] = [:]
    /// Ledger entry ids reserved for the batch's deferred entries, taken in order. Forgotten with `balances` (a ledger
    /// entry written at once gets a later id than every reserved one, so ids keep the order entries were decided in).
    private var ledgerIds: Range<Int64> = 0..<0

    /// Whether the current task runs a batch of this executor.
    var inBatch: Bool { Self.batchOf == ObjectIdentifier(self) }

    /// The executor whose batch the current task runs, if any.
    static var currentBatch: ObjectIdentifier? { batchOf }

    /// Whether a batch or a call holds the connection now (a moment's answer: for choosing a free one, nothing more).
    var isHeld: Bool { gate.isHeld }

    init(label: String, open: @escaping @Sendable () throws -> any SQLConnection,
         flush: @escaping @Sendable (any SQLConnection, [DeferredWrite]) throws -> Void) {
        self.queue = DispatchQueue(label: label)
        self.open = open
        self.flush = flush
    }

    /// Runs `body` on the queue with the connection (in the current batch's transaction, if any).
    /// - Parameter usingReadAhead: `body` reads or consumes what the batch read ahead (`takeReadAhead`, `peekReadAhead`)
    ///   and keeps it true to the database, and flushes the deferred writes it must see (`flushDeferred`); otherwise
    ///   what was read ahead is dropped and the deferred writes are flushed first, as `body` may read or change purchases.
    /// - Parameter inCallingTask: in a batch, `body` runs on the queue synchronously (`DispatchQueue.sync`), which runs it
    ///   on the calling thread when the queue is idle, as it is while the batch's task holds the gate: no thread is woken,
    ///   and the task's thread blocks for any statement `body` makes. For the calls of each message of a batch that are
    ///   answered from what the batch read ahead and deferred (a decision on a purchase read ahead, a read of its record): a
    ///   hop to another thread and back costs two context switches, more than such a call; a miss makes its statement on
    ///   the connection the batch holds, one round trip. Outside a batch it changes nothing.
    func run<T: Sendable>(usingReadAhead: Bool = false, inCallingTask: Bool = false,
                          _ body: @escaping @Sendable (any SQLConnection) throws -> T) async throws -> T {
        let call: @Sendable (any SQLConnection) throws -> T
        if usingReadAhead {
            call = body
        } else {
            call = { [self] connection in
                if !readAhead.isEmpty { readAhead = [:] }
                try flushDeferredBeforeOtherWrites(connection)
                return try body(connection)
            }
        }
        if inBatch {
            if inCallingTask { return try queue.sync { try perform(call) } }
            return try await onQueue(call)
        }
        await gate.enter()
        defer { gate.leave() }
        return try await onQueue(call)
    }

    /// On the queue, in a batch: records what the batch read ahead.
    func setReadAhead(_ purchases: [PurchaseKey: SQLPurchaseStore.ReadAheadPurchase]) { readAhead.merge(purchases) { _, new in new } }

    /// On the queue: what the batch read ahead of `key`, forgotten (the caller is about to change it).
    func takeReadAhead(_ key: PurchaseKey) -> SQLPurchaseStore.ReadAheadPurchase? { readAhead.removeValue(forKey: key) }

    /// On the queue: what the batch read ahead of `key`.
    func peekReadAhead(_ key: PurchaseKey) -> SQLPurchaseStore.ReadAheadPurchase? { readAhead[key] }

    /// On the queue: whether writes are deferred (a batch is open), so that `write` does not make them at once.
    var defersWrites: Bool { batchOpen }

    /// On the queue: makes `write` now, or in a batch, defers it to the next flush. (Its key has no deferred write when
    /// its decision flushed it before reading (`flushDeferred(of:_:)`); one that has is flushed first, to keep the order.
    /// Ledger entries have no key: they only add up.)
    func write(_ write: DeferredWrite, _ connection: any SQLConnection) throws {
        guard batchOpen else { return try flush(connection, [write]) }
        if let key = write.key {
            if deferredKeys.contains(key) { try flushDeferred(connection) }
            deferredKeys.insert(key)
        }
        deferred.append(write)
    }

    /// On the queue: `user`'s balances as the batch left them, if the batch read them.
    func balances(of user: UserID) -> [ItemCode: Int64]? { balances[user] }

    /// On the queue: records `user`'s balances, as read or as a deferred grant leaves them.
    func setBalances(_ amounts: [ItemCode: Int64], of user: UserID) { balances[user] = amounts }

    /// On the queue: the next reserved ledger entry id, if any is left.
    func takeLedgerId() -> Int64? {
        guard let id = ledgerIds.first else { return nil }
        ledgerIds = ledgerIds.dropFirst()
        return id
    }

    /// On the queue: keeps `ids`, reserved by the caller, for the batch's next deferred ledger entries.
    func keepReservedLedgerIds(_ ids: Range<Int64>) { ledgerIds = ids }

    /// On the queue: forgets the balances read and the ledger ids reserved.
    private func forgetBalancesAndReservedIds() {
        if !balances.isEmpty { balances = [:] }
        ledgerIds = 0..<0
    }

    /// On the queue: makes the deferred writes, then forgets the balances read and the ledger ids reserved; before a call
    /// that may change balances or write ledger entries itself.
    func flushDeferredBeforeOtherWrites(_ connection: any SQLConnection) throws {
        try flushDeferred(connection)
        forgetBalancesAndReservedIds()
    }

    /// On the queue: makes the deferred writes.
    func flushDeferred(_ connection: any SQLConnection) throws {
        guard !deferred.isEmpty else { return }
        let writes = deferred
        deferred = []
        deferredKeys = []
        try flush(connection, writes)
    }

    /// On the queue: makes the deferred writes if one of them is of `key` (about to be read).
    func flushDeferred(of key: PurchaseKey, _ connection: any SQLConnection) throws {
        if deferredKeys.contains(key) { try flushDeferred(connection) }
    }

    /// Runs `body` in one transaction, begun with `begin` (the dialect's write transaction): the store's calls in it
    /// join it (see `SQLPurchaseStore.transaction`). Committed when `body` returns; rolled back when it throws.
    /// Within a batch, `body` simply runs in it.
    func batch<T: Sendable>(begin: String, _ body: () async throws -> T) async throws -> T {
        if inBatch { return try await body() }
        await gate.enter()
        defer { gate.leave() }
        try await onQueue(opening: true) { _ = try $0.query(begin) }
        do {
            let result = try await Self.$batchOf.withValue(ObjectIdentifier(self)) { try await body() }
            _ = try await onQueue(closing: true) { [self] connection in
                try flushDeferred(connection)
                try connection.query("COMMIT")
            }
            return result
        } catch {
            // The original error is what matters; a connection the rollback fails on is dropped (with its transaction).
            _ = try? await onQueue(closing: true) { connection in if connection.isInTransaction { try connection.query("ROLLBACK") } }
            throw error
        }
    }

    /// Runs `body` on the queue with the connection. `opening` begins a batch's transaction and `closing` ends it; in a
    /// batch the connection is never replaced (a new one would run the rest of the batch outside its transaction), and
    /// outside one a connection left in a transaction (a rollback that failed) is dropped, never joined.
    private func onQueue<T: Sendable>(opening: Bool = false, closing: Bool = false,
                                      _ body: @escaping @Sendable (any SQLConnection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [self] in
                continuation.resume(with: Result { try perform(opening: opening, closing: closing, body) })
            }
        }
    }

    /// On the queue: runs `body` with the connection.
    private func perform<T: Sendable>(opening: Bool = false, closing: Bool = false, _ body: (any SQLConnection) throws -> T) throws -> T {
        if opening || closing {
            readAhead = [:]
            forgetBalancesAndReservedIds()
        }
        if opening {
            deferred = []
            deferredKeys = []
        }
        defer {
            if closing {
                deferred = []
                deferredKeys = []
                batchOpen = false
                if self.connection?.isInTransaction == true { self.connection = nil }
            }
        }
        do {
            if !batchOpen, let connection = self.connection, connection.isInTransaction { self.connection = nil }
            if batchOpen && self.connection == nil {
                throw DatabaseError(code: "08003", message: "the connection of a batch was lost", isRetriable: true, isConnectionLost: true)
            }
            let connection = try self.connection ?? open()
            self.connection = connection
            let result = try body(connection)
            if opening { batchOpen = true }
            return result
        } catch let error as DatabaseError {
            if error.isConnectionLost { self.connection = nil }
            throw error
        }
    }

    /// A first-come, first-served lock for tasks.
    private final class Gate: Sendable {
        private let state = Mutex<(held: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

        func enter() async {
            await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                let entered = state.withLock { state -> Bool in
                    if !state.held {
                        state.held = true
                        return true
                    }
                    state.waiters.append(waiter)
                    return false
                }
                if entered { waiter.resume() }
            }
        }

        var isHeld: Bool { state.withLock { $0.held } }

        /// Hands the lock to the first waiter, if any.
        func leave() {
            let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard !state.waiters.isEmpty else {
                    state.held = false
                    return nil
                }
                return state.waiters.removeFirst()
            }
            next?.resume()
        }
    }
}

/// Times are stored as milliseconds since 1970 in BIGINT columns, the same in both engines.
enum PurchaseTime {
    static func milliseconds(_ date: Date) -> Int64 { EpochMilliseconds.milliseconds(date) }
    static func date(_ milliseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }
}

import Foundation
import PurchaseDomain
import Synchronization

/// A purchase repository in memory, for tests of the stages: every decision goes through `Lifecycle.transition` and its
/// effects are carried out as `SQLPurchaseStore` carries them out (ledger, balances, entitlements, tombstones, refund
/// decisions, subscription periods, the sweep's flags and outbox, consumption reports, consents and claims). The
/// repository contract tests run the same scenarios on it and on both SQL engines.
///
/// Each call is atomic. A batch (`batch`) holds the store for its task until it ends, as a database transaction would:
/// calls from other tasks wait; one that throws leaves the store as it was before it began.
///
/// Tests inject failures with `failNext(touching:times:transient:)`; `isTransient` is true for the transient ones only.
public final class InMemoryPurchaseStore: Sendable {
    private let tables = Mutex(Tables())
    private let gate = TaskQueueLock()
    private let failures = Mutex<[FailureRule]>([])
    /// The store whose batch the current task runs.
    @TaskLocal private static var batchOf: ObjectIdentifier?

    public init() {}

    private var inBatch: Bool { Self.batchOf == ObjectIdentifier(self) }

    /// Runs `body` on the tables, atomically; outside a batch, after any batch of another task ended. An injected failure
    /// that applies to the call (to one of `keys`) is thrown first, with nothing changed.
    func withTables<T: Sendable>(_ keys: [PurchaseKey] = [], _ body: (inout Tables) -> T) async throws -> T {
        if inBatch { return try locked(keys, body) }
        await gate.lock()
        defer { gate.unlock() }
        return try locked(keys, body)
    }

    private func locked<T: Sendable>(_ keys: [PurchaseKey], _ body: (inout Tables) -> T) throws -> T {
        if let failure = takeFailure(keys) { throw failure }
        return tables.withLock { body(&$0) }
    }
}

// MARK: Batches

extension InMemoryPurchaseStore {
    /// Runs `body` holding the store: other tasks' calls wait until it ends. When `body` throws, the store is put back as
    /// it was before the batch began (a rollback). Within a batch, `body` simply runs in it.
    public func batch<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        if inBatch { return try await body() }
        await gate.lock()
        defer { gate.unlock() }
        let before = tables.withLock { $0 }
        do {
            return try await Self.$batchOf.withValue(ObjectIdentifier(self)) { try await body() }
        } catch {
            tables.withLock { $0 = before }
            throw error
        }
    }

    /// Nothing to read ahead: every answer is in memory already.
    public func readAhead(_ keys: [PurchaseKey], ownersBalances: Bool) async throws {}

    public func isTransient(_ error: any Error) -> Bool { (error as? InjectedStoreFailure)?.isTransient == true }
}

// MARK: Injected failures

/// A failure a test injected (`InMemoryPurchaseStore.failNext`): what a lost connection or a serialization failure is to
/// the SQL store when `isTransient`, a failure that is the same on every try when not.
public struct InjectedStoreFailure: Error, Sendable, CustomStringConvertible {
    public let isTransient: Bool
    public let key: PurchaseKey?
    public var description: String { "injected \(isTransient ? "transient" : "permanent") store failure\(key.map { " of \($0)" } ?? "")" }
}

struct FailureRule: Sendable {
    let key: PurchaseKey?
    var remaining: Int
    let isTransient: Bool
}

extension InMemoryPurchaseStore {
    /// The next `times` calls that name `key` (every call, when nil; a call that names no purchase, such as a sweep, only
    /// then) throw `InjectedStoreFailure` before changing anything.
    public func failNext(touching key: PurchaseKey? = nil, times: Int = 1, transient: Bool = true) {
        failures.withLock { $0.append(FailureRule(key: key, remaining: times, isTransient: transient)) }
    }

    private func takeFailure(_ keys: [PurchaseKey]) -> InjectedStoreFailure? {
        failures.withLock { rules in
            guard let index = rules.firstIndex(where: { rule in rule.remaining > 0 && (rule.key.map(keys.contains) ?? true) }) else { return nil }
            rules[index].remaining -= 1
            let rule = rules[index]
            if rule.remaining == 0 { rules.remove(at: index) }
            return InjectedStoreFailure(isTransient: rule.isTransient, key: rule.key)
        }
    }
}

/// A first-come, first-served lock for tasks: held by a batch across its awaits.
final class TaskQueueLock: Sendable {
    private let state = Mutex<(locked: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    func lock() async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let acquired = state.withLock { state -> Bool in
                guard state.locked else {
                    state.locked = true
                    return true
                }
                state.waiting.append(waiter)
                return false
            }
            if acquired { waiter.resume() }
        }
    }

    /// Hands the lock to the task that waited longest, if any.
    func unlock() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiting.isEmpty else {
                state.locked = false
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }
}

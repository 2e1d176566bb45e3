import Synchronization

/// Lets messages be handled together, or one alone in the whole process: a reader-writer gate for handling, the writer
/// preferred. A suspect of a crash is handled alone (`exclusive`), so that if the process traps meanwhile, the trap
/// is that message's (`TrapRecords`); everything else is handled `shared`, by every partition and runner at once.
final class HandlingGate: Sendable {
    /// The process's gate: every runner's handling goes through it.
    static let process = HandlingGate()

    private struct State {
        var shared = 0
        var exclusive = false
        var waitingExclusive: [CheckedContinuation<Void, Never>] = []
        var waitingShared: [CheckedContinuation<Void, Never>] = []

        var sharedIsFree: Bool { !exclusive && waitingExclusive.isEmpty }
    }

    private let state = Mutex(State())

    /// How many wait to enter, of each kind (for tests).
    var waiting: (shared: Int, exclusive: Int) { state.withLock { ($0.waitingShared.count, $0.waitingExclusive.count) } }

    /// Runs `body` beside other shared holders; waits while a message is handled alone, or waits to be.
    func shared<T>(_ body: () async throws -> T) async rethrows -> T {
        // Without a suspension when nothing is alone: the cost every batch pays.
        if !state.withLock({ state in
            guard state.sharedIsFree else { return false }
            state.shared += 1
            return true
        }) {
            await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                let admitted = state.withLock { state in
                    guard state.sharedIsFree else {
                        state.waitingShared.append(waiter)
                        return false
                    }
                    state.shared += 1
                    return true
                }
                if admitted { waiter.resume() }
            }
        }
        defer { releaseShared() }
        return try await body()
    }

    /// Runs `body` with nothing else handled in the process: waits for the shared holders to finish, and holds new ones back.
    func exclusive<T>(_ body: () async throws -> T) async rethrows -> T {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let admitted = state.withLock { state in
                guard !state.exclusive, state.shared == 0 else {
                    state.waitingExclusive.append(waiter)
                    return false
                }
                state.exclusive = true
                return true
            }
            if admitted { waiter.resume() }
        }
        defer { releaseExclusive() }
        return try await body()
    }

    private func releaseShared() {
        let next: CheckedContinuation<Void, Never>? = state.withLock { state in
            state.shared -= 1
            guard state.shared == 0, !state.waitingExclusive.isEmpty else { return nil }
            state.exclusive = true
            return state.waitingExclusive.removeFirst()
        }
        next?.resume()
    }

    private func releaseExclusive() {
        let (next, admitted): (CheckedContinuation<Void, Never>?, [CheckedContinuation<Void, Never>]) = state.withLock { state in
            if !state.waitingExclusive.isEmpty { return (state.waitingExclusive.removeFirst(), []) }
            state.exclusive = false
            let admitted = state.waitingShared
            state.waitingShared = []
            state.shared += admitted.count
            return (nil, admitted)
        }
        next?.resume()
        for waiter in admitted { waiter.resume() }
    }
}

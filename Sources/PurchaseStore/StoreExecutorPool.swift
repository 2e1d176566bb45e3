import Synchronization

/// The store's connections, one `StoreExecutor` each, so that the batches of a worker's partitions commit side by side
/// instead of queueing for one connection (a batch holds its connection from BEGIN to COMMIT, and its statements wait on
/// the database's round trips, not on this process's CPU).
///
/// Batches of different partitions touch different purchases and users (the pipeline keys its events by user), so they
/// rarely wait on each other's row locks; when they do, it is the same waiting as between two replicas of a worker.
final class StoreExecutorPool: Sendable {
    private let executors: [StoreExecutor]
    private let turn = Atomic<Int>(0)

    /// - Parameter make: the executor of connection `index`; it opens its connection at its first call.
    init(count: Int, make: (Int) -> StoreExecutor) {
        executors = (0..<max(1, count)).map(make)
    }

    var count: Int { executors.count }

    /// The executor of the batch the current task runs; else the first one nothing holds (so that a worker opens more
    /// connections only as its calls overlap); else each in turn. Outside a batch two reads may name different executors:
    /// a call reads it once and hands it on (as `SQLPurchaseStore.decide` hands it to its body).
    var current: StoreExecutor {
        if let batch = StoreExecutor.currentBatch, let executor = executors.first(where: { ObjectIdentifier($0) == batch }) {
            return executor
        }
        if executors.count == 1 { return executors[0] }
        return executors.first { !$0.isHeld } ?? executors[turn.add(1, ordering: .relaxed).newValue % executors.count]
    }
}

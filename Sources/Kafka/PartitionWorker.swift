import Foundation
import Synchronization

/// Handles the messages of one assigned partition, in offset order, on its own task.
///
/// The poll thread hands messages in with `enqueue`; the worker calls the handler with the messages waiting (up to
/// `maxBatch`) and, once the handler and the completion it returned for a message are done, stores the offset after
/// that message. A batch is at most `maxInFlight` messages, taken while up to `maxInFlight` completions are
/// outstanding (so up to 2 × maxInFlight - 1 at once; one at a time with 1); they are awaited in offset order,
/// and all of them before the worker waits for more input. On revocation the worker completes the messages in hand and drops the rest
/// (they are redelivered to the partition's next owner); a handler or completion that fails after the
/// revocation ends the worker without storing its offset, and is not a consumer failure.
final class PartitionWorker: Sendable {
    struct State {
        /// Messages enqueued whose offset is not stored yet.
        var buffered = 0
        /// Messages enqueued and not yet taken by the worker.
        var waiting = 0
        /// Fetching stopped because too many messages are buffered.
        var pausedForBackpressure = false
        /// Paused by the application: no message is handed to the handler until resumed.
        var pausedByUser = false
        var resumeWaiter: CheckedContinuation<Void, Never>?
        var revoked = false
        /// The revocation stopped waiting for us: our offsets must not be stored any more.
        var abandoned = false
    }

    let partition: TopicPartition
    /// Names this assignment of the partition to this member, unlike any other in the process (see
    /// `KafkaConsumer.handlingAssignment`).
    let assignment = PartitionWorker.nextAssignment.add(1, ordering: .relaxed).newValue
    private static let nextAssignment = Atomic<UInt64>(0)
    /// Weak: the consumer's membership owns the client. A worker abandoned by a revocation (its handler still running)
    /// must not keep the client, and with it a member that rejoined as a new one, alive and heartbeating.
    private weak let client: RDKafkaClient?
    private let maxBuffered: Int
    private let maxInFlight: Int
    private let maxBatch: Int
    private let state: Mutex<State>
    private let stream: AsyncStream<KafkaMessage>
    private let continuation: AsyncStream<KafkaMessage>.Continuation
    private let done = DispatchSemaphore(value: 0)
    fileprivate let report: @Sendable (KafkaConsumerEvent) -> Void

    init(partition: TopicPartition, client: RDKafkaClient, maxBuffered: Int, maxInFlight: Int, maxBatch: Int, paused: Bool,
         report: @escaping @Sendable (KafkaConsumerEvent) -> Void) {
        self.partition = partition
        self.client = client
        self.report = report
        self.maxBuffered = maxBuffered
        self.maxInFlight = maxInFlight
        self.maxBatch = max(1, maxBatch)
        self.state = Mutex(State(pausedByUser: paused))
        (stream, continuation) = AsyncStream.makeStream(of: KafkaMessage.self)
    }

    /// Runs the handler over the partition's messages until revoked or the handler fails.
    /// - Parameter onFailure: told about a handler or completion error; the worker then stops without
    ///   storing that offset or any later one.
    func start(handler: @escaping KafkaConsumer.BatchHandler, onFailure: @escaping @Sendable (any Error, KafkaMessage) -> Void) {
        Task { await Self.$current.withValue(self) { await run(handler: handler, onFailure: onFailure) } }
    }

    /// The worker whose handler or completion the current task is running (see `KafkaConsumer.isHandlingRevokedPartition`).
    @TaskLocal static var current: PartitionWorker?

    private func run(handler: @escaping KafkaConsumer.BatchHandler, onFailure: @escaping @Sendable (any Error, KafkaMessage) -> Void) async {
        defer { done.signal() }
        var inFlight = InFlight(worker: self, onFailure: onFailure)
        var messages = stream.makeAsyncIterator()
        while true {
            // Finish outstanding work before waiting for input, so that offsets do not wait for traffic.
            while !inFlight.isEmpty && (inFlight.count >= maxInFlight || !hasWaitingInput) {
                guard await inFlight.completeOldest() else { return }
            }
            guard let first = await messages.next() else { break }
            state.withLock { $0.waiting -= 1 }
            if !(await waitUntilDeliverable()) { break }
            var batch = [first]
            // What is waiting is buffered in the stream already: taking it does not wait. At most `maxInFlight` messages
            // (with 1, one message at a time). The window's free room is not the bound, or under load batches would
            // shrink to what its oldest acknowledgements free: up to 2 × maxInFlight - 1 completions may be outstanding.
            while batch.count < min(maxBatch, maxInFlight) && hasWaitingInput, let next = await messages.next() {
                state.withLock { $0.waiting -= 1 }
                batch.append(next)
            }
            do {
                let completions = try await handler(batch)
                guard completions.count == batch.count else {
                    onFailure(KafkaError(code: .handler, message: "the handler answered \(completions.count) of \(batch.count) messages"), first)
                    return
                }
                for (message, completion) in zip(batch, completions) { inFlight.append(message, completion) }
            } catch let partial as KafkaConsumer.BatchFailure where partial.completions.count < batch.count {
                // The messages before the failed one are done: their offsets are stored; nothing after it is taken.
                for (message, completion) in zip(batch, partial.completions) { inFlight.append(message, completion) }
                while !inFlight.isEmpty {
                    guard await inFlight.completeOldest() else { return }
                }
                if isRevoked { break }
                onFailure(partial.error, batch[partial.completions.count])
                return
            } catch where isRevoked {
                break // A handler that gave up because its partition went: the messages are redelivered to the next owner.
            } catch {
                onFailure(error, first)
                return
            }
        }
        // Revoked: what was handled is completed so that its offsets can be committed.
        while !inFlight.isEmpty {
            guard await inFlight.completeOldest() else { return }
        }
    }

    /// Handled messages whose completion is outstanding, oldest first.
    private struct InFlight {
        let worker: PartitionWorker
        let onFailure: @Sendable (any Error, KafkaMessage) -> Void
        private var entries = FIFOQueue<(message: KafkaMessage, completion: KafkaConsumer.Completion)>()

        init(worker: PartitionWorker, onFailure: @escaping @Sendable (any Error, KafkaMessage) -> Void) {
            self.worker = worker
            self.onFailure = onFailure
        }

        var isEmpty: Bool { entries.isEmpty }
        var count: Int { entries.count }

        mutating func append(_ message: KafkaMessage, _ completion: @escaping KafkaConsumer.Completion) {
            entries.append((message, completion))
        }

        /// Awaits the oldest completion and stores its offset; `false` after a failure (reported).
        mutating func completeOldest() async -> Bool {
            let (message, completion) = entries.removeFirst()
            do {
                try await completion()
            } catch {
                // After revocation a completion may give up: the message is redelivered to the next owner.
                if !worker.isRevoked { onFailure(error, message) }
                return false
            }
            if let error = worker.storeOffset(after: message) { worker.report(.error(error)) }
            return true
        }
    }

    /// Whether the partition was revoked from this worker.
    var isRevoked: Bool { state.withLock { $0.revoked } }

    /// Messages enqueued and not yet taken.
    var waitingCount: Int { state.withLock { $0.waiting } }

    private var hasWaitingInput: Bool {
        state.withLock { $0.waiting > 0 && !$0.pausedByUser && !$0.revoked }
    }

    /// Called on the poll thread.
    func enqueue(_ message: KafkaMessage) {
        state.withLock { state in
            state.buffered += 1
            state.waiting += 1
            if state.buffered >= maxBuffered && !state.pausedForBackpressure {
                state.pausedForBackpressure = true
                // Under the lock so that pause and resume cannot be reordered.
                if !state.pausedByUser { setFetching(false) }
            }
        }
        continuation.yield(message)
    }

    func pause() throws {
        try state.withLock { state in
            if !state.pausedByUser && !state.pausedForBackpressure { try client?.pause([partition]) }
            state.pausedByUser = true
        }
    }

    func resume() throws {
        let waiter = try state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.pausedByUser else { return nil }
            state.pausedByUser = false
            if !state.pausedForBackpressure { try client?.resume([partition]) }
            defer { state.resumeWaiter = nil }
            return state.resumeWaiter
        }
        waiter?.resume()
    }

    /// Stops after the message in hand; the buffered rest is dropped.
    func revoke() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.revoked = true
            defer { state.resumeWaiter = nil }
            return state.resumeWaiter
        }
        continuation.finish()
        waiter?.resume()
    }

    /// Waits (blocking the calling thread, which must not be a cooperative one) until the worker
    /// ended or `deadline` passed; in the latter case its later offsets are never stored.
    /// - Returns: whether the worker ended in time.
    func waitForEnd(until deadline: DispatchTime) -> Bool {
        if done.wait(timeout: deadline) == .success {
            done.signal() // Leave it signalled for any later waiter.
            return true
        }
        state.withLock { $0.abandoned = true }
        return false
    }

    /// Stores the offset after `message` unless the worker was abandoned; returns a store error.
    fileprivate func storeOffset(after message: KafkaMessage) -> KafkaError? {
        state.withLock { state -> KafkaError? in
            state.buffered -= 1
            if state.pausedForBackpressure && state.buffered <= maxBuffered / 2 && !state.revoked {
                state.pausedForBackpressure = false
                if !state.pausedByUser { setFetching(true) }
            }
            guard !state.abandoned else { return nil }
            do {
                try client?.storeOffset(partition, offset: message.offset + 1)
                return nil
            } catch {
                return error as? KafkaError
            }
        }
    }

    /// Pauses or resumes fetching for backpressure; a failure is reported, and only delays or
    /// hastens fetching (ordering and offsets are unaffected).
    private func setFetching(_ on: Bool) {
        do {
            if on { try client?.resume([partition]) } else { try client?.pause([partition]) }
        } catch {
            report(.error(error as? KafkaError ?? KafkaError(code: .consume, message: "\(error)")))
        }
    }

    /// `false` when the worker was revoked while waiting.
    private func waitUntilDeliverable() async -> Bool {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { state -> Bool in
                if state.revoked || !state.pausedByUser { return true }
                state.resumeWaiter = waiter
                return false
            }
            if ready { waiter.resume() }
        }
        return state.withLock { !$0.revoked }
    }
}

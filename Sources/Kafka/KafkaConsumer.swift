import Foundation
import Synchronization

/// Something a consumer wants its owner to know (for logs and readiness).
public enum KafkaConsumerEvent: Sendable {
    case assigned([TopicPartition])
    case revoked([TopicPartition])
    /// Abandoned: the handler of this partition did not finish within the time allowed; its offset was not committed.
    case abandoned(TopicPartition)
    /// A non-fatal error; librdkafka keeps retrying by itself.
    case error(KafkaError)
}

/// A consumer-group member that hands each message to a handler and commits only what was handled.
///
/// - Messages of one partition are handled one at a time, in offset order; different partitions concurrently.
/// - An offset is stored (and later committed) only after the handler returned for its message, and with
///   `runPipelined(_:)` only after its completion did too, in offset order.
/// - On revocation the handler finishes the message in hand (bounded by `revokeTimeout`), stored offsets are
///   committed, and only then are the partitions given up. Messages not handled are redelivered to the next owner.
/// - A handler that throws stops the consumer: nothing past that message is committed, and `run` rethrows — unless
///   its partition was revoked meanwhile: then the message is simply left to the partition's next owner.
/// - Graceful shutdown (`triggerGracefulShutdown()` or cancelling `run`) stops fetching, finishes in-flight
///   handlers, commits, leaves the group (unless `Configuration.leavesGroupOnShutdown` is false), and returns from
///   `run` within `shutdownTimeout` plus librdkafka's close.
public final class KafkaConsumer: Sendable {
    public typealias Handler = @Sendable (KafkaMessage) async throws -> Void
    /// What remains of a message's handling after the handler returned, e.g. awaiting the broker's
    /// acknowledgement of its outputs. It may run while later messages of the partition are handled.
    public typealias Completion = @Sendable () async throws -> Void
    /// A handler that returns before its message is done: see `runPipelined(_:)`.
    public typealias PipelinedHandler = @Sendable (KafkaMessage) async throws -> Completion
    /// A handler of several consecutive messages of one partition at once, returning one completion per message, in
    /// the same order: see `runBatched(maxMessages:_:)`.
    public typealias BatchHandler = @Sendable ([KafkaMessage]) async throws -> [Completion]
    /// Thrown by a batch handler that failed at one of its messages: the completions of the messages before it (which
    /// are done), and the error. Their offsets are stored; the consumer then stops as for any handler error.
    public struct BatchFailure: Error {
        public let completions: [Completion]
        public let error: any Error
        public init(completions: [Completion], error: any Error) {
            self.completions = completions
            self.error = error
        }
    }

    /// Consumer settings; every librdkafka property can be set through `kafka`.
    public struct Configuration: Sendable {
        /// librdkafka properties. `group.id` comes from `groupID`; defaults (`defaults`): eager `range` assignment,
        /// session 10 s, `enable.auto.offset.store=false`, `auto.offset.reset=earliest`, auto-commit of stored offsets,
        /// a prefetch of about 256 messages per partition.
        public var kafka: KafkaConfiguration
        public var groupID: String
        public var topics: [String]
        /// Upper bound on waiting for in-flight handlers at shutdown.
        public var shutdownTimeout: Duration
        /// Upper bound on waiting for in-flight handlers of revoked partitions during a rebalance.
        public var revokeTimeout: Duration
        /// Messages buffered per partition before its fetching is paused.
        public var maxBufferedPerPartition: Int
        /// With `runPipelined(_:)` or `runBatched`: messages of a partition whose completion may be outstanding when the
        /// next is taken (a batch taken then adds up to as many again).
        public var maxInFlightPerPartition: Int
        /// Receives assignment changes and non-fatal errors, on the poll thread; keep it quick.
        public var onEvent: (@Sendable (KafkaConsumerEvent) -> Void)?
        /// Whether a graceful shutdown ends with a LeaveGroup (the default, as Kafka clients do: the group reassigns the
        /// member's partitions at once). When false, the member finishes and commits its in-flight work as before, then
        /// goes silently, and the coordinator expels it when its session ends (10 s later). For brokers that mishandle a
        /// LeaveGroup during a rebalance: Tansu 0.6 keeps a leader that left mid-rebalance as the group's leader, so no
        /// member can complete a rebalance again and rejoining does not help; an expelled member is cleared.
        public var leavesGroupOnShutdown = true

        public init(
            kafka: KafkaConfiguration, groupID: String, topics: [String],
            shutdownTimeout: Duration = .seconds(30), revokeTimeout: Duration = .seconds(30),
            maxBufferedPerPartition: Int = 256, maxInFlightPerPartition: Int = 1, onEvent: (@Sendable (KafkaConsumerEvent) -> Void)? = nil
        ) {
            self.kafka = kafka
            self.groupID = groupID
            self.topics = topics
            self.shutdownTimeout = shutdownTimeout
            self.revokeTimeout = revokeTimeout
            self.maxBufferedPerPartition = max(2, maxBufferedPerPartition)
            self.maxInFlightPerPartition = max(1, maxInFlightPerPartition)
            self.onEvent = onEvent
        }

        /// The group settings every consumer runs with — the workers and the tests alike. Eager `range`
        /// assignment: a rebalance revokes everything and assigns anew in one round, which completes on Apache
        /// Kafka and on the local broker alike (Tansu 0.6 never finishes the second round of a cooperative
        /// rebalance: a member joining a running group got no partitions, and the partitions the first member
        /// gave up were owned by nobody). Session 10 s with a heartbeat every second: a member that crashed is
        /// replaced within ten seconds (brokers accept 6 s to 30 min by default). The poll loop runs on its own
        /// thread whatever the handlers do, so librdkafka's `max.poll.interval.ms` (5 min) is never the bound.
        static let defaults = [
            "partition.assignment.strategy": "range",
            "session.timeout.ms": "10000",
            "heartbeat.interval.ms": "1000",
            "enable.auto.offset.store": "false",
            "enable.auto.commit": "true",
            "auto.commit.interval.ms": "1000",
            "auto.offset.reset": "earliest",
            // Prefetch sized to what a stage takes in a few batches, not librdkafka's 100,000 messages per partition:
            // a backlog (a burst of submissions, a restart behind the input) otherwise sits in the worker's memory,
            // 25 MiB more for the verifier under the benchmark. The queue refills within 10 ms of running low
            // instead of the default second, which would cap a partition at its prefetch per second.
            "queued.min.messages": "256",
            "fetch.queue.backoff.ms": "10",
            // A client has one fetch in flight per broker. While it waits on partitions with nothing new (an idle topic
            // beside a busy one: the verifier's notifications), a partition resumed after backpressure waits for that
            // answer before it is fetched again. At librdkafka's 500 ms the verifier waited for input a third of the
            // benchmark with a backlog of thousands on the broker; at 100 ms, 2 % at most. An idle consumer pays 10 empty
            // fetches a second (50 ms gained nothing more and cost the local broker more CPU).
            "fetch.wait.max.ms": "100",
            // And bounded in bytes: a fetch brings at most 256 KiB a partition (librdkafka's default 1 MiB; it grows the
            // limit for a message larger than that), the queue at most 1 MiB (default 64 MiB). 3 KiB submissions were
            // 4 MiB of fetch buffers in the verifier, which then peaked at 60–68 MiB; with these 57 MiB, no slower.
            "fetch.message.max.bytes": "262144",
            "queued.max.messages.kbytes": "1024",
        ]
    }

    /// The current membership; `rejoinGroup()` replaces it. `stopping` once a graceful shutdown was asked for.
    private let membership: Mutex<(core: ConsumerCore, stopping: Bool)>
    /// librdkafka's properties with the defaults and `group.id`, for each new membership's client.
    private let kafka: KafkaConfiguration
    private var core: ConsumerCore { membership.withLock { $0.core } }

    public init(configuration: Configuration) throws {
        try KafkaLibrary.requireSupportedVersion()
        var kafka = configuration.kafka.withDefaults(Configuration.defaults)
        kafka["group.id"] = configuration.groupID
        self.kafka = kafka
        let client = try RDKafkaClient.make(kind: .consumer, configuration: kafka, handlesRebalance: true)
        membership = Mutex((ConsumerCore(client: client, configuration: configuration, paused: []), false))
    }

    deinit { core.requestShutdown() }

    /// Subscribes and handles messages until graceful shutdown, a fatal client error, or a handler error,
    /// which it then throws. Call it once.
    public func run(_ handler: @escaping Handler) async throws {
        try await runPipelined { message in
            try await handler(message)
            return {}
        }
    }

    /// Like `run(_:)`, but a message's handling ends in two steps: the handler (called in offset order,
    /// one at a time per partition) and the `Completion` it returns, awaited in offset order while up to
    /// `maxInFlightPerPartition` later messages are handled. A message's offset is stored after its
    /// completion returned; a completion that throws stops the consumer as a handler error does.
    public func runPipelined(_ handler: @escaping PipelinedHandler) async throws {
        try await runBatched(maxMessages: 1) { messages in [try await handler(messages[0])] }
    }

    /// Like `runPipelined(_:)`, but the handler takes the messages of a partition that are waiting when it is called,
    /// up to `maxMessages` (at least one; no waiting for more): under load a stage does its work for many messages
    /// at once, and idle it answers each message as it comes. Each message's offset is stored once its completion
    /// returned, in order, so an offset never passes a message whose completion has not. A handler that throws
    /// stops the consumer, as for `runPipelined(_:)`, reported at the batch's first message.
    public func runBatched(maxMessages: Int, _ handler: @escaping BatchHandler) async throws {
        let maxMessages = max(1, maxMessages)
        while true {
            let core = self.core
            try core.client.subscribe(topics: core.configuration.topics)
            await withTaskCancellationHandler {
                await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
                    core.start(handler: handler, maxBatch: maxMessages, finished: finished)
                }
            } onCancel: {
                self.triggerGracefulShutdown()
            }
            if core.endedWithoutLeaving {
                // The old client must go, or it would stay in the group, heartbeating, as long as this consumer lives. Its
                // successor is a new member once it subscribes: the coordinator gives it an id, which starts a new generation.
                let client = try RDKafkaClient.make(kind: .consumer, configuration: kafka, handlesRebalance: true)
                // Under the lock, so that no pause or resume falls between the two memberships.
                membership.withLock { $0.core = ConsumerCore(client: client, configuration: core.configuration, paused: core.pausedPartitions) }
            }
            if let error = core.failure { throw error }
            guard core.endedForRejoin, !membership.withLock({ $0.stopping }) else { return }
        }
    }

    /// Leaves the group as a member that vanished would, and joins it again as a new member, without stopping `run`.
    ///
    /// In-flight handlers of its partitions finish (bounded by `revokeTimeout`) and their offsets are committed; then
    /// the client is dropped without a LeaveGroup (which a coordinator stuck in a rebalance may never answer) and a
    /// new one subscribes. The coordinator expels the old member after the session timeout; the new one makes it
    /// start a new generation and assign anew. For a group whose rebalances no longer complete with this member
    /// (`GroupWatchdog` asks for it).
    public func rejoinGroup() {
        membership.withLock { membership in
            guard !membership.stopping else { return }
            membership.core.requestShutdown(rejoin: true)
        }
    }

    /// Starts a graceful shutdown; `run` returns when it is complete.
    public func triggerGracefulShutdown() {
        membership.withLock { membership in
            membership.stopping = true
            membership.core.requestShutdown()
        }
    }

    /// Stops fetching and handling `partition` until `resume`. Applies also if it is assigned later.
    public func pause(_ partition: TopicPartition) throws { try membership.withLock { try $0.core.setPaused(partition, true) } }

    /// Undoes `pause`.
    public func resume(_ partition: TopicPartition) throws { try membership.withLock { try $0.core.setPaused(partition, false) } }

    /// Whether the partition whose message the calling task is handling (or completing) was revoked from this
    /// member: a handler waiting to retry should then give up, leaving the message to the partition's next owner.
    /// `false` outside handlers.
    public static var isHandlingRevokedPartition: Bool { PartitionWorker.current?.isRevoked ?? false }

    /// Names the assignment of the partition whose messages the calling task is handling: the same for every batch of
    /// one assignment, another after the partition was revoked and assigned again (to this member or a new consumer of
    /// the process). nil outside handlers. What a handler remembers of a partition holds only within one assignment.
    public static var handlingAssignment: UInt64? { PartitionWorker.current?.assignment }

    /// How long this member has been without partitions (since it subscribed, or since its last revocation left it
    /// none); nil while it has some.
    public var withoutPartitionsFor: Duration? { core.withoutPartitionsSince.map { ContinuousClock.now - $0 } }

    /// The id the group coordinator gave this member (nil before it joined, and while it joins anew).
    public var memberID: String? { core.client.memberID }

    /// The topics this consumer subscribes to.
    public var topics: [String] { core.configuration.topics }

    /// The consumer group this member joins.
    public var groupID: String { core.configuration.groupID }

    /// The partitions currently assigned to this member.
    public var assignment: Set<TopicPartition> { core.assignment }

    /// Consumer lag of each assigned partition (high watermark − committed offset, -1 when unknown), from
    /// librdkafka's latest statistics. Empty unless `statistics.interval.ms` is set.
    public var lag: [TopicPartition: Int64] {
        guard let text = core.client.events.statistics.withLock({ $0 }) else { return [:] }
        return KafkaStatistics.consumerLag(json: Data(text.utf8), of: core.assignment)
    }

    /// The first and the next offset of `partition` (messages are at low..<high). Blocks up to `timeout`.
    public func watermarks(_ partition: TopicPartition, timeout: Duration = .seconds(10)) throws -> (low: Int64, high: Int64) {
        try core.client.watermarks(partition, timeoutMs: Int32(timeout.milliseconds))
    }

    /// Commits the stored offsets now and waits for the broker.
    public func commit() throws { try core.client.commitStoredOffsets() }

    /// The group's committed offsets for `partitions` (absent where none).
    public func committedOffsets(_ partitions: [TopicPartition], timeout: Duration = .seconds(10)) throws -> [TopicPartition: Int64] {
        try core.client.committedOffsets(partitions, timeoutMs: Int32(timeout.milliseconds))
    }

    /// Stops without committing or leaving the group, as a crashed process would. For tests of redelivery.
    func simulateCrash() {
        membership.withLock { membership in
            membership.stopping = true
            membership.core.requestShutdown(crash: true)
        }
    }

    /// Messages of `partition` fetched and not yet taken by its worker. For tests of the pipelining window.
    func waitingMessages(_ partition: TopicPartition) -> Int { core.waitingMessages(partition) }
}

/// The consumer's state shared with its poll thread and partition workers.
private final class ConsumerCore: Sendable {
    struct State {
        var handler: (run: KafkaConsumer.BatchHandler, maxBatch: Int)?
        var workers: [TopicPartition: PartitionWorker] = [:]
        var paused: Set<TopicPartition> = []
        var shutdownRequested = false
        var crash = false
        /// The shutdown ends this membership only: `KafkaConsumer.rejoinGroup()`.
        var rejoin = false
        var shutdownDeadline: DispatchTime?
        /// The poll loop ended without closing the client (no LeaveGroup): a crash, a rejoin, or a shutdown that goes
        /// silently (`leavesGroupOnShutdown`).
        var endedWithoutLeaving = false
        var failure: KafkaError?
        /// Since when the member has had no partitions (from the start, or since a revocation left it none).
        var withoutPartitionsSince: ContinuousClock.Instant? = .now
    }

    let client: RDKafkaClient
    let configuration: KafkaConsumer.Configuration
    private let state = Mutex(State())

    init(client: RDKafkaClient, configuration: KafkaConsumer.Configuration, paused: Set<TopicPartition>) {
        self.client = client
        self.configuration = configuration
        state.withLock { $0.paused = paused }
    }

    var assignment: Set<TopicPartition> { state.withLock { Set($0.workers.keys) } }
    var withoutPartitionsSince: ContinuousClock.Instant? { state.withLock { $0.withoutPartitionsSince } }
    func waitingMessages(_ partition: TopicPartition) -> Int { state.withLock { $0.workers[partition] }?.waitingCount ?? 0 }
    var failure: KafkaError? { state.withLock { $0.failure } }
    var endedForRejoin: Bool { state.withLock { $0.rejoin } }
    var endedWithoutLeaving: Bool { state.withLock { $0.endedWithoutLeaving } }
    var pausedPartitions: Set<TopicPartition> { state.withLock { $0.paused } }

    func start(handler: @escaping KafkaConsumer.BatchHandler, maxBatch: Int, finished: CheckedContinuation<Void, Never>) {
        state.withLock { $0.handler = (handler, maxBatch) }
        client.events.rebalanceHandler.withLock {
            $0 = RDKafkaEvents.RebalanceHandler(
                willRevoke: { [weak self] in self?.revoke($0) },
                didAssign: { [weak self] in self?.assign($0) }
            )
        }
        PollThread.start(name: "kafka-consumer-poll", iteration: { [self] in pollOnce() }, finished: { finished.resume() })
    }

    func requestShutdown(crash: Bool = false, rejoin: Bool = false) {
        state.withLock { state in
            guard !state.shutdownRequested else {
                // A graceful shutdown asked for while a rejoin is pending ends with a LeaveGroup, not a new member.
                if !crash && !rejoin { state.rejoin = false }
                return
            }
            state.shutdownRequested = true
            state.crash = crash
            state.rejoin = rejoin
            state.shutdownDeadline = .now() + .nanoseconds(Int(configuration.shutdownTimeout.nanoseconds))
        }
    }

    func setPaused(_ partition: TopicPartition, _ paused: Bool) throws {
        let worker = state.withLock { state -> PartitionWorker? in
            if paused { state.paused.insert(partition) } else { state.paused.remove(partition) }
            return state.workers[partition]
        }
        if paused { try worker?.pause() } else { try worker?.resume() }
    }

    /// One poll-loop iteration on the poll thread; `false` ends the loop.
    private func pollOnce() -> Bool {
        for error in client.events.drainErrors() {
            if error.isFatal || client.fatalError() != nil {
                fail(client.fatalError() ?? error)
            } else {
                report(.error(error))
            }
        }
        let (shutdown, crash, rejoin) = state.withLock { ($0.shutdownRequested, $0.crash, $0.rejoin) }
        if shutdown {
            if crash {
                revoke(assignment.map { $0 }, abandon: true)
            } else if rejoin || !configuration.leavesGroupOnShutdown {
                // Not closed: the client goes without a LeaveGroup when this core is released.
                revoke(assignment.map { $0 })
            } else {
                close()
                return false
            }
            state.withLock { $0.endedWithoutLeaving = true }
            return false
        }
        switch client.consumerPoll(timeoutMs: 100) {
        case .message(let message):
            let worker = state.withLock { $0.workers[message.topicPartition] }
            worker?.enqueue(message) // Without a worker the partition was just revoked: it is redelivered.
        case .error(let error):
            report(.error(error))
        case .partitionEnd, nil:
            break
        }
        return true
    }

    /// Leaves the group: librdkafka runs the revoke callback (finishing in-flight work and committing) first.
    private func close() {
        do {
            try client.closeConsumer()
        } catch {
            report(.error(error as? KafkaError ?? KafkaError(code: .shutdown, message: "\(error)")))
        }
        // Partitions the close did not revoke (e.g. the group was already lost).
        revoke(assignment.map { $0 }, commit: false)
    }

    private func assign(_ partitions: [TopicPartition]) {
        let (handler, paused) = state.withLock { ($0.handler, $0.paused) }
        guard let handler else { return }
        // Fetching starts afresh: a partition paused for backpressure under its previous worker (before an eager
        // rebalance took it and gave it back) would otherwise stay paused in librdkafka with a worker that never
        // resumes it.
        let fresh = partitions.filter { !paused.contains($0) }
        if !fresh.isEmpty {
            do { try client.resume(fresh) } catch { report(.error(error as? KafkaError ?? KafkaError(code: .consume, message: "\(error)"))) }
        }
        var started: [PartitionWorker] = []
        for partition in partitions {
            let worker = PartitionWorker(
                partition: partition, client: client, maxBuffered: configuration.maxBufferedPerPartition,
                maxInFlight: configuration.maxInFlightPerPartition, maxBatch: handler.maxBatch,
                paused: paused.contains(partition), report: { [weak self] in self?.report($0) })
            if paused.contains(partition) {
                do { try worker.pause() } catch { report(.error(error as? KafkaError ?? KafkaError(code: .consume, message: "\(error)"))) }
            }
            worker.start(handler: handler.run, onFailure: { [weak self] error, message in self?.handlerFailed(error, message) })
            started.append(worker)
        }
        state.withLock { state in
            for worker in started { state.workers[worker.partition] = worker }
            if !state.workers.isEmpty { state.withoutPartitionsSince = nil }
        }
        report(.assigned(partitions))
    }

    /// Lets the in-flight work of `partitions` finish (bounded), then commits what was handled.
    private func revoke(_ partitions: [TopicPartition], abandon: Bool = false, commit: Bool = true) {
        let (workers, deadline) = state.withLock { state -> ([PartitionWorker], DispatchTime) in
            let workers = partitions.compactMap { state.workers.removeValue(forKey: $0) }
            // Under the lock: whoever sees the partition gone from `assignment` finds its worker revoked.
            workers.forEach { $0.revoke() }
            if state.workers.isEmpty && state.withoutPartitionsSince == nil { state.withoutPartitionsSince = .now }
            let timeout = DispatchTime.now() + .nanoseconds(Int(configuration.revokeTimeout.nanoseconds))
            return (workers, min(state.shutdownDeadline ?? timeout, timeout))
        }
        guard !workers.isEmpty else { return }
        for worker in workers where !worker.waitForEnd(until: abandon ? .now() : deadline) {
            report(.abandoned(worker.partition))
        }
        if commit && !abandon {
            do { try client.commitStoredOffsets() } catch { report(.error(error as? KafkaError ?? KafkaError(code: .commit, message: "\(error)"))) }
        }
        report(.revoked(partitions))
    }

    private func handlerFailed(_ error: any Error, _ message: KafkaMessage) {
        let failure = KafkaError(
            code: .handler,
            message: "handler failed for \(message.topicPartition) offset \(message.offset): \(error)")
        fail(failure)
    }

    private func fail(_ error: KafkaError) {
        state.withLock { if $0.failure == nil { $0.failure = error } }
        requestShutdown()
    }

    private func report(_ event: KafkaConsumerEvent) { configuration.onEvent?(event) }
}

extension Duration {
    /// Whole milliseconds (librdkafka's timeouts; truncated).
    public var milliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
    /// Whole nanoseconds (Dispatch deadlines; truncated).
    public var nanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }
    /// Seconds as a `TimeInterval` (dates).
    public var seconds: TimeInterval { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

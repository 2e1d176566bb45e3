import Foundation
import Kafka
import Metrics
import Synchronization

/// What a stage decided about one message.
public enum StageResult: Sendable {
    /// Events to publish; the input is done once the broker acknowledged all of them.
    case publish([KafkaProducerMessage])
    /// The message cannot be processed, ever: kept on the dead-letter topic with the reason.
    case deadLetter(reason: String, detail: String)
    /// Events to publish now, and the message to be handed back to the stage after `after` (e.g. a payment still
    /// pending at the store: answered, then asked about again). The runner parks it without its key, so the key's
    /// later messages do not wait; re-checks continue with growing delays for `parkedBudget`. Without parking, the
    /// events are published and the message is done.
    case recheck(publish: [KafkaProducerMessage], after: Duration)
}

/// An error after which the same work may succeed later (database busy or failing over, store API
/// down, broker unavailable). The runner retries it with backoff on that partition, within its retry budget.
public struct TransientError: Error, Sendable, CustomStringConvertible {
    public let description: String
    /// How long the other side asked us to wait (e.g. a store API's `Retry-After`): the retry waits at least that.
    public let retryAfter: Duration?
    public init(_ description: String, retryAfter: Duration? = nil) {
        self.description = description
        self.retryAfter = retryAfter
    }
}

/// One pipeline stage's message handling.
public protocol MessageStage: Sendable {
    /// `verifier`, `granter`, …: the consumer group suffix, log field and dead-letter `stage`.
    var name: String { get }
    var topics: [String] { get }
    func handle(_ message: KafkaMessage) async throws -> StageResult
    /// Handles consecutive messages of one partition at once, e.g. with one database transaction for all of them.
    /// Answers a prefix of `messages`, in order: the outcome of each of its messages is final (its effects are done),
    /// and a `.failure` may only end it. The runner takes a `.failure` over (retrying it in place, parking or
    /// dead-lettering it), hands the message after the prefix to `handle(_:)` alone, and then batches the rest anew; so
    /// a stage whose batch failed undoes what it did and answers `[]`. Default: `handle(_:)` for each message, up to
    /// the first that throws.
    func handle(batch messages: [KafkaMessage]) async -> [Result<StageResult, any Error>]
    /// Whether `error` is worth retrying. Default: `TransientError` and retriable Kafka errors.
    func isTransient(_ error: any Error) -> Bool
    /// Whether `message` waits behind a parked message of its key (and, parked itself, holds the key's later ones).
    /// Default: yes. No for what the stage records whatever came before it, such as a consumption report, which the
    /// store keeps until its purchase is granted: held behind a grant that fails for hours, it would not be known when
    /// the purchase's deadline comes.
    func keepsOrder(_ message: KafkaMessage) -> Bool
}

extension MessageStage {
    public func handle(batch messages: [KafkaMessage]) async -> [Result<StageResult, any Error>] {
        var results: [Result<StageResult, any Error>] = []
        for message in messages {
            do {
                results.append(.success(try await handle(message)))
            } catch {
                results.append(.failure(error))
                break
            }
        }
        return results
    }

    public func isTransient(_ error: any Error) -> Bool {
        if error is TransientError { return true }
        if let kafka = error as? KafkaError { return kafka.isRetriable }
        return false
    }

    public func keepsOrder(_ message: KafkaMessage) -> Bool { true }
}

/// Runs a stage on a consumer group: hands each message to the stage, publishes what it returns and waits
/// for the broker's acknowledgement before the input's offset may be committed. Transient failures are
/// retried with exponential backoff and jitter on that partition only (others keep flowing; order within
/// the partition holds). Anything else becomes a dead letter with its reason: nothing is dropped.
///
/// With `Parking`, a message still failing after `retryBudget` is parked (see `StageRunner+Parking.swift`):
/// recorded in the ledger and published on the retry topic, so its partition moves on; later messages of its
/// key are parked behind it; the runner's re-driver hands parked records back to the stage once due.
public final class StageRunner: Service {
    public struct Configuration: Sendable {
        public var initialBackoff: Duration = .milliseconds(100)
        public var maxBackoff: Duration = .seconds(30)
        /// How long a message failing transiently is retried on its partition before it is parked (with `Parking`).
        public var retryBudget: Duration = .seconds(300)
        /// How long after parking the re-driver first tries a parked message again.
        public var parkedDelay: Duration = .seconds(60)
        /// The longest a parked message waits between tries: its delay doubles from `parkedDelay` up to this.
        public var maxParkedDelay: Duration = .seconds(3600)
        /// How long after parking a re-driven message still failing becomes a dead letter (`parkedTooLong`).
        public var parkedBudget: Duration = .seconds(86_400)
        /// How many waiting messages of a partition the stage may handle at once (`MessageStage.handle(batch:)`).
        public var maxBatch = Self.defaultMaxBatch
        /// The workers' default (`--max-batch`): under the benchmark, batches of about ninety-five in the verifier and
        /// seventy downstream, against sixty and fifty with 64, cost PostgreSQL and the broker up to 46 % less CPU per
        /// purchase, the p99 latency at 1,000/s stays under 2 s, and each worker under 64 MiB (docs/benchmarks.md, "Batch size",
        /// has the runs).
        public static let defaultMaxBatch = 128
        public init() {}
    }

    let stage: any MessageStage
    let consumer: KafkaConsumer
    private let producer: KafkaProducer
    /// What the dead letters of the stage say.
    private let deadLetters: any DeadLetterWriter
    let logger: Logger
    let configuration: Configuration
    /// Parks past the retry budget and re-drives what was parked; nil: transient failures are retried in place until done.
    let parking: Parking?
    private let stopping = Mutex(false)
    /// Which partitions' outputs failed to be delivered, for sending later ones again after them.
    private let outputOrder = OutputOrder()
    /// Counters for tests: `handled`, `deadLettered`, `retries`, `parked`, `redriven`, `batches`, `batchesCut`.
    public let counters = Mutex<[String: Int]>([:])
    /// `iap_messages_total`, `iap_retries_total`, `iap_dead_letters_total`, `iap_handler_duration_seconds`, `iap_in_flight_messages`.
    public let metrics: MetricsRegistry
    /// The series every message updates, named once.
    private let inFlight, handlerDuration, publishDuration, batchSize: MetricsRegistry.SeriesKey
    /// `iap_messages_total{outcome="handled"}` (see `count`).
    let handled: MetricsRegistry.SeriesKey
    /// The consumer, e.g. for its assignment (readiness) and lag (metrics).
    public var kafkaConsumer: KafkaConsumer { consumer }
    /// Every consumer of this runner: the stage's, and its re-driver's (with parking).
    public var consumers: [KafkaConsumer] { [consumer] + (parking.map { [$0.consumer] } ?? []) }
    /// The stage's name (`verifier`, …).
    public var stageName: String { stage.name }

    public init(stage: any MessageStage, consumer: KafkaConsumer, producer: KafkaProducer, deadLetters: any DeadLetterWriter, logger: Logger,
                configuration: Configuration = Configuration(), metrics: MetricsRegistry = MetricsRegistry(), parking: Parking? = nil) {
        self.parking = parking
        self.stage = stage
        self.consumer = consumer
        self.producer = producer
        self.deadLetters = deadLetters
        self.logger = logger
        self.configuration = configuration
        self.metrics = metrics
        Self.declareMetrics(metrics)
        inFlight = metrics.series("iap_in_flight_messages", ["stage": stage.name])
        handlerDuration = metrics.series("iap_handler_duration_seconds", ["stage": stage.name])
        publishDuration = metrics.series("iap_publish_duration_seconds", ["stage": stage.name])
        batchSize = metrics.series("iap_batch_size", ["stage": stage.name])
        handled = metrics.series("iap_messages_total", ["stage": stage.name, "outcome": "handled"])
    }

    public func run() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                try await untilStopped {
                    try await consumer.runBatched(maxMessages: configuration.maxBatch) { [self] messages in try await process(batch: messages) }
                }
            }
            if let parking {
                group.addTask { [self] in try await untilStopped { try await parking.consumer.run { [self] record in try await redrive(record) } } }
            }
            try await group.waitForAll()
        }
        await producer.shutdown()
    }

    /// Runs a consumer loop; a retry loop interrupted by shutdown ends it quietly (that message was not committed
    /// and will be redelivered).
    private func untilStopped(_ loop: () async throws -> Void) async throws {
        do {
            try await loop()
        } catch let error as KafkaError where error.code == .handler && stopping.withLock({ $0 }) {
            logger.info("stopped while retrying", ["detail": error.message])
        }
    }

    public func triggerGracefulShutdown() {
        stopping.withLock { $0 = true }
        consumer.triggerGracefulShutdown()
        parking?.consumer.triggerGracefulShutdown()
    }

    /// Shutting down, or the partition a retry loop holds was revoked: the message is redelivered to its next owner.
    struct Interrupted: Error {}

    /// Handles `message` and hands its outputs to the producer; the returned completion awaits their
    /// acknowledgement, so the next message of the partition is handled meanwhile (the consumer stores
    /// offsets only as completions return, in order). Outputs the broker did not take are sent again as they
    /// were, until it takes them: a broker refusing them refuses every partition's, and the message cannot be
    /// parked (later messages of the partition were handled already). Then the later messages' outputs, enqueued
    /// before and perhaps delivered first, are sent again after them (`OutputOrder`).
    private func process(_ message: KafkaMessage) async throws -> KafkaConsumer.Completion {
        let completion = try await complete(message, first: await attempt(message), started: ContinuousClock.now)
        metrics.observe(batchSize, 1) // handled alone: a batch of one
        return completion
    }

    /// Handles consecutive messages of a partition: runs of them whose keys have nothing parked go to the stage at
    /// once (`MessageStage.handle(batch:)`); a message the batch did not answer, or whose key has a parked message,
    /// goes through `process(_:)` alone, and the run after it is formed anew. One completion per message, in order.
    private func process(batch messages: [KafkaMessage]) async throws -> [KafkaConsumer.Completion] {
        var completions: [KafkaConsumer.Completion] = []
        completions.reserveCapacity(messages.count)
        do {
            try await process(batch: messages, into: &completions)
        } catch {
            // Interrupted (shutdown, revocation) or failed at a message: the ones before it are done and their offsets may
            // be stored; the partition's worker stops there.
            throw KafkaConsumer.BatchFailure(completions: completions, error: error)
        }
        return completions
    }

    private func process(batch messages: [KafkaMessage], into completions: inout [KafkaConsumer.Completion]) async throws {
        let started = ContinuousClock.now
        var next = 0
        while next < messages.count {
            let run = await unparkedRun(messages[next...])
            guard !run.isEmpty else {
                completions.append(try await process(messages[next]))
                next += 1
                continue
            }
            let results = await stage.handle(batch: Array(run))
            // What the stage answered was decided together; the rest is handled alone or batched again, and counted then.
            if !results.isEmpty { metrics.observe(batchSize, Double(min(results.count, run.count))) }
            if run.count > 1 {
                count("batches")
                if results.count < run.count { count("batchesCut") }
            }
            for (message, result) in zip(run, results.prefix(run.count)) {
                completions.append(try await complete(message, first: result, started: started))
            }
            next += min(results.count, run.count)
            if results.count < run.count {
                completions.append(try await process(messages[next]))
                next += 1
            }
        }
    }

    /// The messages from the start of `messages` whose keys have no parked message (all of them without parking);
    /// empty when the first one's key has, or when the ledger cannot tell (the message then goes alone, retried).
    private func unparkedRun(_ messages: ArraySlice<KafkaMessage>) async -> ArraySlice<KafkaMessage> {
        guard let parking else { return messages }
        let keys = messages.map(orderingKey)
        let parked: Set<OrderingKey>
        do {
            parked = try await parking.withLedger { try await $0.parkedKeys(stage: stage.name, among: Set(keys.compactMap { $0 })) }
        } catch {
            return messages.prefix(0)
        }
        let free = keys.prefix { key in key.map { !parked.contains($0) } ?? true }.count
        return messages.prefix(free)
    }

    /// Takes a message from the first outcome of its handling to done: outputs handed to the producer (the returned
    /// completion awaits their acknowledgement), or retried, parked or dead-lettered before it returns.
    private func complete(_ message: KafkaMessage, first: Result<StageResult, any Error>,
                          started: ContinuousClock.Instant) async throws -> KafkaConsumer.Completion {
        metrics.increment(inFlight)
        let done: @Sendable () -> Void = { [metrics, inFlight, handlerDuration] in
            metrics.increment(inFlight, by: -1)
            metrics.observe(handlerDuration, duration: ContinuousClock.now - started)
        }
        guard case .success(.publish(let outputs)) = first else {
            defer { done() }
            try await processWithRetries(message, first: first) { [self] in await attempt(message) }
            return {}
        }
        let partition = TopicPartition(topic: message.topic, partition: message.partition)
        let mark = outputOrder.mark(partition)
        let sent = ContinuousClock.now
        let pending = await producer.enqueue(contentsOf: outputs)
        return { [self] in
            defer { done() }
            var first = Result<StageResult, any Error>.success(.publish(outputs))
            if let failure = await acknowledged(pending, sentAt: sent) {
                outputOrder.failed(partition)
                first = .failure(failure)
            }
            if outputOrder.failedSince(mark, partition) {
                // Ours failed, or an earlier message's did and was sent again after ours: sent (again) after those.
                try await processWithRetries(message, first: first, parkable: false) { .success(.publish(outputs)) }
            } else {
                count("handled")
            }
        }
    }

    /// One attempt at a message from the input: the stage's answer, or `ParkedAhead` when its key has a parked message.
    func attempt(_ message: KafkaMessage) async -> Result<StageResult, any Error> {
        do {
            if let parking, let key = orderingKey(message) {
                let ahead = try await parking.withLedger { try await $0.parked(stage: stage.name, key: key) }
                if let first = ahead.first { throw ParkedAhead(first: first) }
            }
            return .success(try await stage.handle(message))
        } catch {
            return .failure(error)
        }
    }

    /// Handles a message from the input until it is done (outputs acknowledged, dead-lettered or parked), starting
    /// from the outcome of a first attempt and trying `again`; transient failures are retried with backoff while
    /// the partition stays assigned, and past `retryBudget` the message is parked when `parkable`.
    private func processWithRetries(_ message: KafkaMessage, first: Result<StageResult, any Error>, parkable: Bool = true,
                                    again: () async -> Result<StageResult, any Error>) async throws {
        var attempt = 0
        var outcome = first
        let started = ContinuousClock.now
        while true {
            do {
                switch try outcome.get() {
                case .publish(let outputs):
                    try await publish(outputs)
                    count("handled")
                case .deadLetter(let reason, let detail):
                    try await deadLetter(message, reason: reason, detail: detail)
                case .recheck(let outputs, let after):
                    try await publish(outputs)
                    count("handled")
                    if parking != nil {
                        try await park(ParkedRecord(parking: message, stage: stage.name, reason: "re-check", answered: true, at: Date(),
                                                    due: Date().addingTimeInterval(after.seconds)), recheck: true)
                    }
                }
                return
            } catch let ahead as ParkedAhead {
                // Behind a parked message of the same key (possibly itself, parked before a crash): parked too.
                if try await parkTried(message, reason: "behind \(ahead.first), parked earlier with the same key") { return }
                attempt += 1
                try await sleep(backoff(attempt))
            } catch let error where isTransient(error) {
                attempt += 1
                count("retries")
                if parkable && parking != nil && ContinuousClock.now - started >= configuration.retryBudget,
                   try await parkTried(message, reason: "\(error)") {
                    return
                }
                let delay = retryDelay(attempt, after: error)
                logger.warning("transient failure, retrying", ["topic": message.topic, "partition": message.partition, "offset": message.offset,
                                                               "attempt": attempt, "delayMs": delay.milliseconds, "error": "\(error)"])
                try await sleep(delay)
            } catch {
                logger.error("cannot process message", ["topic": message.topic, "partition": message.partition, "offset": message.offset,
                                                        "error": "\(error)"])
                do {
                    try await deadLetter(message, reason: "processingFailed", detail: "\(error)")
                    return
                } catch where stage.isTransient(error) {
                    attempt += 1
                    try await sleep(backoff(attempt))
                }
            }
            outcome = await again()
        }
    }

    /// The stage's judgement, and the parking ledger's failures: never the message's fault, so always worth a retry.
    func isTransient(_ error: any Error) -> Bool { error is ParkingLedgerError || stage.isTransient(error) }

    /// Awaits the broker's answers for `pending`; the first failure, if any.
    private func acknowledged(_ pending: PendingDeliveries, sentAt: ContinuousClock.Instant) async -> KafkaError? {
        let results = await pending.results()
        if !results.isEmpty { // nothing sent, nothing to time
            metrics.observe(publishDuration, duration: ContinuousClock.now - sentAt)
        }
        for case .failure(let error) in results { return error }
        return nil
    }

    func publish(_ messages: [KafkaProducerMessage]) async throws {
        let sent = ContinuousClock.now
        if let failure = await acknowledged(await producer.enqueue(contentsOf: messages), sentAt: sent) { throw failure }
    }

    func deadLetter(_ message: KafkaMessage, reason: String, detail: String) async throws {
        let failedAt = Date()
        func record(stripped: Bool) throws -> KafkaProducerMessage {
            try deadLetters.record(of: message, stage: stage.name, reason: reason, detail: detail, failedAt: failedAt, stripped: stripped)
        }
        do {
            try await publish([try record(stripped: false)])
        } catch let error as KafkaError where !error.isRetriable {
            // The broker refuses the record itself (e.g. too large for its limits): keep the reason and the
            // source coordinates, without the original bytes, rather than stop the stage.
            logger.error("dead letter refused; publishing it without the original bytes", ["error": error.description])
            try await publish([try record(stripped: true)])
        }
        count("deadLettered", reason: reason)
        logger.warning("dead-lettered", ["topic": message.topic, "partition": message.partition, "offset": message.offset, "reason": reason])
    }

    /// `backoff(attempt)`, or longer when `error` says how long the other side asked us to wait (at most `maxRetryAfter`:
    /// a longer wait is the retry budget's and the parking's to handle).
    func retryDelay(_ attempt: Int, after error: any Error) -> Duration { Self.retryDelay(backoff: backoff(attempt), after: error) }

    /// `backoff`, or what `error` asked for when that is longer (at most `maxRetryAfter`).
    public static func retryDelay(backoff: Duration, after error: any Error) -> Duration {
        max(backoff, min((error as? TransientError)?.retryAfter ?? .zero, maxRetryAfter))
    }

    /// The longest a `Retry-After` holds a partition's retry.
    public static let maxRetryAfter = Duration.seconds(120)

    /// Exponential, capped, drawn from [capped/2, capped] so that workers retrying together spread out.
    func backoff(_ attempt: Int) -> Duration {
        let base = configuration.initialBackoff.milliseconds * Int64(1 << min(attempt - 1, 20))
        let capped = min(base, configuration.maxBackoff.milliseconds)
        return .milliseconds(Int64.random(in: capped / 2...max(capped / 2, capped)))
    }

    /// Sleeps unless shutting down or the partition being handled is revoked, checking often enough to stop promptly.
    func sleep(_ delay: Duration) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + delay
        try await clock.sleep(for: delay, unless: { stopping.withLock { $0 } || KafkaConsumer.isHandlingRevokedPartition })
        // Woken before the deadline: told to stop.
        if clock.now < deadline { throw Interrupted() }
    }
}


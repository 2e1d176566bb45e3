import Foundation
import Kafka
import Metrics
import PurchaseEvents
import Synchronization

/// What a stage decided about one message.
public enum StageResult: Sendable {
    /// Events to publish; the input is done once the broker acknowledged all of them.
    case publish([KafkaProducerMessage])
    /// The message cannot be processed, ever: kept on the dead-letter topic with the reason.
    case deadLetter(reason: String, detail: String)
}

/// An error after which the same work may succeed later (database busy or failing over, store API
/// down, broker unavailable). The runner retries it with backoff on that partition, within its retry budget.
public struct TransientError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// One pipeline stage's message handling.
public protocol MessageStage: Sendable {
    /// `verifier`, `granter`, …: the consumer group suffix, log field and dead-letter `stage`.
    var name: String { get }
    var topics: [String] { get }
    func handle(_ message: KafkaMessage) async throws -> StageResult
    /// Whether `error` is worth retrying. Default: `TransientError` and retriable Kafka errors.
    func isTransient(_ error: any Error) -> Bool
}

extension MessageStage {
    public func isTransient(_ error: any Error) -> Bool {
        if error is TransientError { return true }
        if let kafka = error as? KafkaError { return kafka.isRetriable }
        return false
    }
}

/// Runs a stage on a consumer group: hands each message to the stage, publishes what it returns and waits
/// for the broker's acknowledgement before the input's offset may be committed. Transient failures are
/// retried with exponential backoff and jitter on that partition only (others keep flowing; order within
/// the partition holds) — for at most `retryBudget`: then the message is parked on the retry topic with its
/// origin and the partition moves on. Later messages with the same key (the same user) are parked behind it,
/// so one user's events keep their order; the runner's re-driver (its own consumer of the retry topic) feeds
/// parked messages back to the stage in order once due, retrying each in place until it is done. Anything
/// else becomes a dead letter with its reason: nothing is dropped.
///
/// The keys waiting behind a parked message are known to this process only: after a restart, a later
/// message of such a key may be handled before the parked one is re-driven. Stages judge events in any order
/// (a refund before its purchase, a consumption report before the grant), so this costs order, not
/// correctness.
public final class StageRunner: Service {
    public struct Configuration: Sendable {
        public var initialBackoff: Duration = .milliseconds(100)
        public var maxBackoff: Duration = .seconds(30)
        /// How much of a dead-lettered message's value its dead letter keeps (see `DeadLetter.init`).
        public var deadLetterValueBytes = DeadLetter.maxValueBytes
        /// How long a message is retried on its partition before it is parked; nil: retried there until done.
        public var retryBudget: Duration?
        /// How long a parked message waits before its re-driver tries it again.
        public var parkedDelay: Duration = .seconds(60)
        public init() {}
    }

    private let stage: any MessageStage
    private let consumer: KafkaConsumer
    private let producer: KafkaProducer
    private let codec: EventCodec
    private let logger: Logger
    private let configuration: Configuration
    private let stopping = Mutex(false)
    /// Parks past the retry budget and re-drives parked messages; nil without a retry budget.
    private let retry: (consumer: KafkaConsumer, topic: String)?
    /// Keys with messages parked and not yet re-driven, and how many.
    private let parkedKeys = Mutex<[Data: Int]>([:])
    /// Counters for tests: `handled`, `deadLettered`, `retries`.
    public let counters = Mutex<[String: Int]>([:])
    /// `iap_messages_total`, `iap_retries_total`, `iap_dead_letters_total`, `iap_handler_duration_seconds`, `iap_in_flight_messages`.
    public let metrics: MetricsRegistry
    /// The consumer, e.g. for its assignment (readiness) and lag (metrics).
    public var kafkaConsumer: KafkaConsumer { consumer }

    /// - Parameter retryConsumer: a consumer of `codec.retryTopic` in a group of this stage's own; required for
    ///   `configuration.retryBudget` to park anything.
    public init(stage: any MessageStage, consumer: KafkaConsumer, producer: KafkaProducer, codec: EventCodec, logger: Logger,
                configuration: Configuration = Configuration(), metrics: MetricsRegistry = MetricsRegistry(), retryConsumer: KafkaConsumer? = nil) {
        self.retry = configuration.retryBudget == nil ? nil : retryConsumer.map { ($0, codec.retryTopic) }
        self.stage = stage
        self.consumer = consumer
        self.producer = producer
        self.codec = codec
        self.logger = logger
        self.configuration = configuration
        self.metrics = metrics
        Self.declareMetrics(metrics)
    }

    /// The runner's metric families (declared by every stage, so that dashboards find them at zero).
    public static func declareMetrics(_ metrics: MetricsRegistry) {
        metrics.declare("iap_messages_total", .counter, help: "Input messages done, by stage and outcome (handled, deadLettered).")
        metrics.declare("iap_retries_total", .counter, help: "Transient failures retried, by stage.")
        metrics.declare("iap_dead_letters_total", .counter, help: "Messages dead-lettered, by stage and reason.")
        metrics.declare("iap_handler_duration_seconds", .histogram, help: "Time from taking a message to its outputs acknowledged, retries included.")
        metrics.declare("iap_in_flight_messages", .gauge, help: "Messages being handled now.")
        metrics.declare("iap_publish_duration_seconds", .histogram, help: "Time from sending a message's outputs to the broker's acknowledgement.")
        metrics.declare("iap_parked_total", .counter, help: "Messages parked on the retry topic (retry budget spent, or behind a parked message of their key), by stage.")
    }

    public func run() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                try await interruptible { try await consumer.runPipelined { [self] message in try await process(message) } }
            }
            if let retry {
                group.addTask { [self] in try await interruptible { try await retry.consumer.run { [self] message in try await redrive(message) } } }
            }
            try await group.waitForAll()
        }
        await producer.shutdown()
    }

    /// Runs a consumer loop; a retry loop interrupted by shutdown ends it quietly (that message was not committed
    /// and will be redelivered).
    private func interruptible(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let error as KafkaError where error.code == .handler && stopping.withLock({ $0 }) {
            logger.info("stopped while retrying", ["detail": error.message])
        }
    }

    public func triggerGracefulShutdown() {
        stopping.withLock { $0 = true }
        consumer.triggerGracefulShutdown()
        retry?.consumer.triggerGracefulShutdown()
    }

    private struct Interrupted: Error {}

    /// Handles `message` and hands its outputs to the producer; the returned completion awaits their
    /// acknowledgement, so the next message of the partition is handled meanwhile (the consumer stores
    /// offsets only as completions return, in order). Outputs the broker did not take are produced again by
    /// handling the message again: stages are idempotent, and a repeat answers what the first one did.
    private func process(_ message: KafkaMessage) async throws -> KafkaConsumer.Completion {
        if retry != nil, let key = message.key, parkedKeys.withLock({ $0[key, default: 0] > 0 }) {
            // Behind a parked message of the same key: parked too, so the key's order holds.
            try await park(message, attempts: 0, why: "behind a parked message of the same key")
            return {}
        }
        let labels = ["stage": stage.name]
        let started = ContinuousClock.now
        metrics.increment("iap_in_flight_messages", labels)
        let done: @Sendable () -> Void = { [metrics] in
            metrics.increment("iap_in_flight_messages", labels, by: -1)
            metrics.observe("iap_handler_duration_seconds", labels, duration: ContinuousClock.now - started)
        }
        let first: Result<StageResult, any Error>
        do { first = .success(try await stage.handle(message)) } catch { first = .failure(error) }
        guard case .success(.publish(let outputs)) = first else {
            defer { done() }
            try await processWithRetries(message, first: first)
            return {}
        }
        let sent = ContinuousClock.now
        let pending = await producer.enqueue(contentsOf: outputs)
        return { [self] in
            defer { done() }
            if let failure = await acknowledged(pending, sentAt: sent) {
                try await processWithRetries(message, first: .failure(failure))
            } else {
                count("handled")
            }
        }
    }

    /// Handles `message` until it is done (outputs acknowledged or dead-lettered), starting from the
    /// outcome of a first attempt; transient failures are retried with backoff.
    private func processWithRetries(_ message: KafkaMessage, first: Result<StageResult, any Error>, parkable: Bool = true) async throws {
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
                }
                return
            } catch let error where stage.isTransient(error) {
                attempt += 1
                count("retries")
                if parkable, retry != nil, let budget = configuration.retryBudget, ContinuousClock.now - started >= budget {
                    try await park(message, attempts: attempt, why: "\(error)")
                    return
                }
                let delay = backoff(attempt)
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
            do { outcome = .success(try await stage.handle(message)) } catch { outcome = .failure(error) }
        }
    }

    /// Header names of a parked record's origin and schedule.
    enum ParkedHeader {
        static let stage = "iap-parked-stage", topic = "iap-parked-topic", partition = "iap-parked-partition", offset = "iap-parked-offset"
        static let due = "iap-parked-due", attempts = "iap-parked-attempts"
    }

    /// Publishes `message` to the retry topic with its origin and when to try it again; the input is then done.
    private func park(_ message: KafkaMessage, attempts: Int, why: String) async throws {
        guard let retry else { return }
        let due = Int64((Date().timeIntervalSince1970 + Double(configuration.parkedDelay.milliseconds) / 1000) * 1000)
        let origin = [(ParkedHeader.stage, stage.name), (ParkedHeader.topic, message.topic), (ParkedHeader.partition, String(message.partition)),
                      (ParkedHeader.offset, String(message.offset)), (ParkedHeader.due, String(due)), (ParkedHeader.attempts, String(attempts))]
        let parked = KafkaProducerMessage(topic: retry.topic, key: message.key, value: message.value,
                                          headers: message.headers + origin.map { KafkaHeader(key: $0.0, string: $0.1) })
        try await publish([parked])
        if let key = message.key { parkedKeys.withLock { $0[key, default: 0] += 1 } }
        count("parked")
        logger.error("parked on the retry topic", ["topic": message.topic, "partition": message.partition, "offset": message.offset,
                                                   "attempts": attempts, "reason": String(why.prefix(500))])
    }

    /// A parked record of this stage, once due: handled as it first arrived, retried in place until done (its key's
    /// later messages are parked behind it, so they wait).
    private func redrive(_ parked: KafkaMessage) async throws {
        guard parked.header(ParkedHeader.stage) == stage.name, let topic = parked.header(ParkedHeader.topic) else { return }
        let due = parked.header(ParkedHeader.due).flatMap { Int64($0) }.map { Date(timeIntervalSince1970: Double($0) / 1000) } ?? Date()
        let wait = due.timeIntervalSinceNow
        if wait > 0 { try await sleep(.milliseconds(Int64(wait * 1000))) }
        let original = KafkaMessage(topic: topic, partition: parked.header(ParkedHeader.partition).flatMap { Int32($0) } ?? 0,
                                    offset: parked.header(ParkedHeader.offset).flatMap { Int64($0) } ?? 0, key: parked.key, value: parked.value,
                                    headers: parked.headers.filter { !$0.key.hasPrefix("iap-parked-") })
        let first: Result<StageResult, any Error>
        do { first = .success(try await stage.handle(original)) } catch { first = .failure(error) }
        try await processWithRetries(original, first: first, parkable: false)
        if let key = parked.key {
            parkedKeys.withLock { keys in
                keys[key, default: 1] -= 1
                if keys[key] == 0 { keys[key] = nil }
            }
        }
        logger.info("re-driven", ["topic": topic, "offset": original.offset])
    }

    /// Awaits the broker's answers for `pending`; the first failure, if any.
    private func acknowledged(_ pending: PendingDeliveries, sentAt: ContinuousClock.Instant) async -> KafkaError? {
        let results = await pending.results()
        if !results.isEmpty { // nothing sent, nothing to time
            metrics.observe("iap_publish_duration_seconds", ["stage": stage.name], duration: ContinuousClock.now - sentAt)
        }
        for case .failure(let error) in results { return error }
        return nil
    }

    private func publish(_ messages: [KafkaProducerMessage]) async throws {
        let sent = ContinuousClock.now
        if let failure = await acknowledged(await producer.enqueue(contentsOf: messages), sentAt: sent) { throw failure }
    }

    private func deadLetter(_ message: KafkaMessage, reason: String, detail: String) async throws {
        let letter = DeadLetter(reason: reason, detail: detail, stage: stage.name, message: message, failedAt: Date(),
                                keepValueBytes: configuration.deadLetterValueBytes)
        do {
            try await publish([try codec.message(letter, time: Date())])
        } catch let error as KafkaError where !error.isRetriable {
            // The broker refuses the record itself (e.g. too large for its limits): keep the reason and the
            // source coordinates, without the original bytes, rather than stop the stage.
            logger.error("dead letter refused; publishing it without the original bytes", ["error": error.description])
            try await publish([try codec.message(letter.stripped, time: Date())])
        }
        count("deadLettered", reason: reason)
        logger.warning("dead-lettered", ["topic": message.topic, "partition": message.partition, "offset": message.offset, "reason": reason])
    }

    /// Exponential, capped, with full jitter so that workers retrying together spread out.
    private func backoff(_ attempt: Int) -> Duration {
        let base = configuration.initialBackoff.milliseconds * Int64(1 << min(attempt - 1, 20))
        let capped = min(base, configuration.maxBackoff.milliseconds)
        return .milliseconds(Int64.random(in: capped / 2...max(capped / 2, capped)))
    }

    /// Sleeps unless shutting down, checking often enough to stop promptly.
    private func sleep(_ delay: Duration) async throws {
        let deadline = ContinuousClock.now + delay
        while ContinuousClock.now < deadline {
            if stopping.withLock({ $0 }) { throw Interrupted() }
            try await Task.sleep(for: min(.milliseconds(100), deadline - ContinuousClock.now))
        }
    }

    private func count(_ name: String, reason: String? = nil) {
        counters.withLock { $0[name, default: 0] += 1 }
        switch name {
        case "retries": metrics.increment("iap_retries_total", ["stage": stage.name])
        case "parked": metrics.increment("iap_parked_total", ["stage": stage.name])
        default:
            metrics.increment("iap_messages_total", ["stage": stage.name, "outcome": name])
            if let reason { metrics.increment("iap_dead_letters_total", ["stage": stage.name, "reason": reason]) }
        }
    }
}

extension Duration {
    var milliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
}

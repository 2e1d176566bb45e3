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
/// down, broker unavailable). The runner retries it with backoff, holding that partition.
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
/// the partition holds). Anything else becomes a dead letter with its reason: nothing is dropped.
public final class StageRunner: Service {
    public struct Configuration: Sendable {
        public var initialBackoff: Duration = .milliseconds(100)
        public var maxBackoff: Duration = .seconds(30)
        /// How much of a dead-lettered message's value its dead letter keeps (see `DeadLetter.init`).
        public var deadLetterValueBytes = DeadLetter.maxValueBytes
        public init() {}
    }

    private let stage: any MessageStage
    private let consumer: KafkaConsumer
    private let producer: KafkaProducer
    private let codec: EventCodec
    private let logger: Logger
    private let configuration: Configuration
    private let stopping = Mutex(false)
    /// Counters for tests: `handled`, `deadLettered`, `retries`.
    public let counters = Mutex<[String: Int]>([:])
    /// `iap_messages_total`, `iap_retries_total`, `iap_dead_letters_total`, `iap_handler_duration_seconds`, `iap_in_flight_messages`.
    public let metrics: MetricsRegistry
    /// The consumer, e.g. for its assignment (readiness) and lag (metrics).
    public var kafkaConsumer: KafkaConsumer { consumer }

    public init(stage: any MessageStage, consumer: KafkaConsumer, producer: KafkaProducer, codec: EventCodec, logger: Logger,
                configuration: Configuration = Configuration(), metrics: MetricsRegistry = MetricsRegistry()) {
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
    }

    public func run() async throws {
        do {
            try await consumer.runPipelined { [self] message in try await process(message) }
        } catch let error as KafkaError where error.code == .handler && stopping.withLock({ $0 }) {
            // A retry loop interrupted by shutdown: that message was not committed and will be redelivered.
            logger.info("stopped while retrying", ["detail": error.message])
        }
        await producer.shutdown()
    }

    public func triggerGracefulShutdown() {
        stopping.withLock { $0 = true }
        consumer.triggerGracefulShutdown()
    }

    private struct Interrupted: Error {}

    /// Handles `message` and hands its outputs to the producer; the returned completion awaits their
    /// acknowledgement, so the next message of the partition is handled meanwhile (the consumer stores
    /// offsets only as completions return, in order). Outputs the broker did not take are produced again by
    /// handling the message again: stages are idempotent, and a repeat answers what the first one did.
    private func process(_ message: KafkaMessage) async throws -> KafkaConsumer.Completion {
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
    private func processWithRetries(_ message: KafkaMessage, first: Result<StageResult, any Error>) async throws {
        var attempt = 0
        var outcome = first
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
        default:
            metrics.increment("iap_messages_total", ["stage": stage.name, "outcome": name])
            if let reason { metrics.increment("iap_dead_letters_total", ["stage": stage.name, "reason": reason]) }
        }
    }
}

extension Duration {
    var milliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
}

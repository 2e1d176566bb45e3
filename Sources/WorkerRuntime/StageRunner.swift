import Foundation
import Kafka
import Metrics
import Synchronization

/// Runs a stage on a consumer group: hands each message to the stage, publishes what it returns and waits
/// for the broker's acknowledgement before the input's offset may be committed. Transient failures are
/// retried with exponential backoff and jitter on that partition only (others keep flowing; order within
/// the partition holds). Anything else becomes a dead letter with its reason: nothing is dropped.
///
/// With `Parking`, a message still failing after `retryBudget` is parked (see `StageRunner+Parking.swift`):
/// recorded in the ledger and published on the retry topic, so its partition moves on; later messages of its
/// key are parked behind it; the runner's re-driver (`StageRunner+Redriver.swift`) hands parked records back to
/// the stage once due.
///
/// Where each part lives:
/// - `StageRunner+Input.swift`: a partition's messages, from the stage's answers to completions (batches, output
///   order, retries in place). `BatchSplit` and `MessageRetries` decide; the extension does what they say.
/// - `StageRunner+Outputs.swift`: publishing, and dead letters (`DeadLetterWriter` says what they hold).
/// - `StageRunner+Parking.swift`, `StageRunner+Redriver.swift`: the retry topic; `ParkedSchedule` decides when.
/// - `StageRunner+Metrics.swift`: the metric families and test counters.
public final class StageRunner: Service {
    public struct Configuration: Sendable {
        /// The first wait before a message failing transiently is tried again on its partition.
        public var initialBackoff: Duration = .milliseconds(100)
        /// The longest such wait: it doubles from `initialBackoff` up to this.
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
        /// purchase, the p99 latency at 1,000/s stays under 2 s, and each worker under 64 MiB (docs/benchmarks.md, "Batch size").
        public static let defaultMaxBatch = 128
        /// Test-only: a message whose `StageRunner.faultHeader` header holds these bytes traps the process when handed to
        /// the stage, to show crash containment. nil (never set in a deployment): no message can reach the trap.
        public var faultMark: Data?
        /// With an `InFlightLedger`: the directory where a worker that traps leaves the message it had alone in hand
        /// (`TrapRecords`), read back by the next process of the stage. It must outlive the process (an `emptyDir`).
        /// nil: a trap is not told from a kill, and a message that traps the worker is handed to it again, alone.
        public var trapRecordDirectory: String?
        public init() {}

        var backoff: Backoff { Backoff(initial: initialBackoff, maximum: maxBackoff) }
        var parkedSchedule: ParkedSchedule { ParkedSchedule(parkedDelay: parkedDelay, maxParkedDelay: maxParkedDelay, parkedBudget: parkedBudget) }
    }

    let stage: any MessageStage
    let consumer: KafkaConsumer
    let producer: KafkaProducer
    /// What the dead letters of the stage say.
    let deadLetters: any DeadLetterWriter
    let logger: Logger
    let configuration: Configuration
    /// Parks past the retry budget and re-drives what was parked; nil: transient failures are retried in place until done.
    let parking: Parking?
    /// Finds the message that crashes the worker (`StageRunner+Crashes.swift`); nil: a crash is retried as a redelivery.
    let crashGuard: CrashGuard?
    private let stopping = Mutex(false)
    /// Which partitions' outputs failed to be delivered, for sending later ones again after them.
    let outputOrder = OutputOrder()
    /// Counters for tests: `handled`, `deadLettered`, `retries`, `parked`, `redriven`, `rechecks`, `batches`, `batchesCut`.
    public let counters = Mutex<[String: Int]>([:])
    /// `iap_messages_total`, `iap_retries_total`, `iap_dead_letters_total`, `iap_handler_duration_seconds`, `iap_in_flight_messages`, …
    /// (`declareMetrics`).
    public let metrics: MetricsRegistry
    /// The series every message updates, named once.
    let series: StageSeries
    /// The consumer, e.g. for its assignment (readiness) and lag (metrics).
    public var kafkaConsumer: KafkaConsumer { consumer }
    /// Every consumer of this runner: the stage's, and its re-driver's (with parking).
    public var consumers: [KafkaConsumer] { [consumer] + (parking.map { [$0.consumer] } ?? []) }
    /// The stage's name (`verifier`, …).
    public var stageName: String { stage.name }

    /// - Parameters:
    ///   - producer: publishes the stage's outputs, its dead letters and its parked records; shut down when the runner ends.
    ///   - deadLetters: the records of messages given up on.
    ///   - parking: with it, messages past `Configuration.retryBudget` are parked; without, retried in place until done.
    ///   - inFlight: with it, a message that traps the worker is dead-lettered (`crashedWorker`) after its second crash.
    public init(stage: any MessageStage, consumer: KafkaConsumer, producer: KafkaProducer, deadLetters: any DeadLetterWriter, logger: Logger,
                configuration: Configuration = Configuration(), metrics: MetricsRegistry = MetricsRegistry(), parking: Parking? = nil,
                inFlight: (any InFlightLedger)? = nil) {
        self.parking = parking
        crashGuard = inFlight.map(CrashGuard.init)
        self.stage = stage
        self.consumer = consumer
        self.producer = producer
        self.deadLetters = deadLetters
        self.logger = logger
        self.configuration = configuration
        self.metrics = metrics
        Self.declareMetrics(metrics)
        series = StageSeries(metrics, stage: stage.name)
    }

    /// Consumes the stage's topics (and, with parking, the retry topic) until `triggerGracefulShutdown()`.
    public func run() async throws {
        if let crashGuard, let directory = configuration.trapRecordDirectory {
            do {
                try TrapRecords.install(directory: directory)
                try await confirmTraps(in: directory, ledger: crashGuard.ledger)
            } catch {
                // Not a reason to stay down: without records a trap is taken for a kill (its message handled again, alone).
                logger.error("trap records are off: a message that traps the worker will not be dead-lettered", ["directory": directory, "error": "\(error)"])
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                try await untilStopped {
                    try await consumer.runBatched(maxMessages: configuration.maxBatch) { [self] messages in try await process(batch: messages) }
                }
            }
            if let parking {
                group.addTask { [self] in try await untilStopped { try await parking.consumer.run { [self] record in try await redriveGuarded(record) } } }
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

    /// Sleeps unless shutting down or the partition being handled is revoked, checking often enough to stop promptly.
    func sleep(_ delay: Duration) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + delay
        try await clock.sleep(for: delay, unless: { stopping.withLock { $0 } || KafkaConsumer.isHandlingRevokedPartition })
        // Woken before the deadline: told to stop.
        if clock.now < deadline { throw Interrupted() }
    }

    /// The stage's judgement, and the parking ledger's failures: never the message's fault, so always worth a retry.
    func isTransient(_ error: any Error) -> Bool { error is ParkingLedgerError || stage.isTransient(error) }
}

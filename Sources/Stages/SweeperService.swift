import Foundation
import Kafka
import PurchaseEvents
import PurchaseStore
import Synchronization
import WorkerRuntime

/// `iap-sweeper`: finds purchases paid but not finished whose purchase time is older than the consume
/// deadline, marks them `refund_due` — exactly once, however many sweepers run — and emits `refund.due`.
/// The event goes through an outbox: sent after the flag, re-sent (same `ce_id`) until recorded as sent,
/// so a crash between the two loses nothing. Runs on a schedule, or once (a Kubernetes CronJob).
/// Generic over `Clock` so that tests drive time.
public final class SweeperService<C: Clock>: Service where C.Duration == Duration {
    public struct Configuration: Sendable {
        /// Consume deadline per store (AppCoins refunds unconsumed purchases after 24 hours).
        public var deadlines: [Store: TimeInterval]
        public var interval: Duration
        public var batchSize: Int

        public init(deadlines: [Store: TimeInterval] = [.appstore: 86_400, .appcoins: 86_400], interval: Duration = .seconds(300), batchSize: Int = 500) {
            self.deadlines = deadlines
            self.interval = interval
            self.batchSize = batchSize
        }
    }

    private let configuration: Configuration
    private let store: SQLPurchaseStore
    private let producer: KafkaProducer
    private let context: StageContext
    private let clock: C
    private let state = Mutex<(stopped: Bool, sleeper: Task<Void, Never>?)>((false, nil))

    public init(configuration: Configuration, store: SQLPurchaseStore, producer: KafkaProducer, context: StageContext, clock: C) {
        self.configuration = configuration
        self.store = store
        self.producer = producer
        self.context = context
        self.clock = clock
    }

    /// One sweep over every store: flags what is due, then sends the outbox; returns how many this call flagged.
    @discardableResult
    public func sweepOnce() async throws -> Int {
        var flagged = 0
        for (storeName, deadline) in configuration.deadlines.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            while case let due = try await store.sweepDue(store: storeName.rawValue, deadline: deadline, now: context.now(),
                                                        limit: configuration.batchSize), !due.isEmpty {
                flagged += due.count
                context.logger.info("flagged refund due", ["store": storeName.rawValue, "count": due.count])
            }
            while case let unsent = try await store.unsentRefundNotices(store: storeName.rawValue, deadline: deadline,
                                                                      limit: configuration.batchSize), !unsent.isEmpty {
                let events: [any PipelineEvent] = unsent.map {
                    RefundDue(store: storeName, transactionId: $0.record.key.transactionId, userId: $0.record.userId, productId: $0.record.productId,
                              state: nil, purchaseDate: $0.record.purchaseTime, deadline: $0.deadline, flaggedAt: context.now())
                }
                if case .publish(let messages) = try context.messages(events) {
                    for result in await producer.send(contentsOf: messages) { _ = try result.get() }
                }
                try await store.markRefundNoticesSent(unsent.map(\.record.key), at: context.now())
            }
        }
        return flagged
    }

    public func run() async throws {
        while !state.withLock({ $0.stopped }) {
            do {
                try await sweepOnce()
            } catch {
                context.logger.error("sweep failed; trying again next interval", ["error": "\(error)"])
            }
            let sleeper = Task { [clock, configuration] in _ = try? await clock.sleep(for: configuration.interval) }
            let stopped = state.withLock { state -> Bool in
                if !state.stopped { state.sleeper = sleeper }
                return state.stopped
            }
            if stopped { sleeper.cancel() }
            await sleeper.value
        }
        await producer.shutdown()
    }

    public func triggerGracefulShutdown() {
        state.withLock { state in
            state.stopped = true
            state.sleeper?.cancel()
        }
    }
}

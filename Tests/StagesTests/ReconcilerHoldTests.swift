import Foundation
import InMemoryPurchaseStore
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import Synchronization
import Testing
import WorkerRuntime

/// The wait a store's API asks of a history (`Retry-After`) is kept to the millisecond, and in the store: a following
/// reconciler (another replica, the next `iap-sweeper --once` run) waits for it too.
@Suite struct ReconcilerHoldTests {
    /// A history whose API asks, the first time, to wait 1.5 s; it counts the pages asked for.
    final class RateLimitedHistory: StoreHistory {
        let asked = Mutex(0)
        var name: String { "limited" }
        var checkpoint: String { "test.limited" }
        var kept: TimeInterval { 86_400 }
        var recordsPublished: Bool { false }

        func page(from start: Date, to end: Date, token: String?, readAt: Date) async -> Result<StoreHistoryPage, StoreHistoryFailure> {
            let first = asked.withLock { asked in
                asked += 1
                return asked == 1
            }
            return first ? .failure(.unavailable("rate limited", retryAfter: .milliseconds(1500))) : .success(.init(entries: [], nextToken: nil))
        }
    }

    @Test func aWaitTheAPIAskedForIsKeptToTheMillisecondForTheNextRun() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let store = InMemoryPurchaseStore()
        let history = RateLimitedHistory()
        let t0 = Date(timeIntervalSince1970: 1_765_000_000)
        /// A reconciler as one `--once` run makes it, at `now`: the same store, nothing else shared.
        func run(at now: Date) async throws -> StoreReconciler<ContinuousClock>.Pass {
            let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": cluster.bootstrapServers])))
            let reconciler = StoreReconciler(configuration: .init(callsPerSecond: 1000), histories: [history], store: store, producer: producer,
                                             context: StageContext(codec: StageFixtures.codec, logger: Logger(stage: "reconciler", minimum: .error),
                                                                   now: { now }),
                                             clock: ContinuousClock())
            return try #require(try await reconciler.reconcileOnce()["limited"])
        }
        let limited = try await run(at: t0)
        #expect(!limited.completed && history.asked.withLock { $0 } == 1)
        #expect(try await store.checkpointHeld("test.limited") == t0.addingTimeInterval(1.5), "kept to the millisecond")
        let early = try await run(at: t0.addingTimeInterval(1.499))
        #expect(early.pages == 0 && history.asked.withLock { $0 } == 1, "the next run waits what is left of the 1.5 s")
        let due = try await run(at: t0.addingTimeInterval(1.5))
        #expect(due.completed && history.asked.withLock { $0 } == 2, "asked again once the wait ran out")
    }
}

import Foundation
import Kafka
import Metrics
import PurchaseDomain
import PurchaseEvents
import StoreFixtures
import Testing
import TestSupport
import WorkerRuntime

/// The pipeline's topics grown from 4 to 8 partitions while purchases flow (docs/reliability.md: "Adding partitions to a
/// running deployment"), on a broker whose topics can grow (`GrowableBroker`).
@Suite(TestServices.pythonTools, .timeLimit(.minutes(11)))
struct PartitionGrowthTests {
    /// Users' later submissions land on other partitions than their earlier ones, the stages take the new partitions
    /// up (their groups' watchdogs have a member whose slice no longer matches rejoin), and the books stay exact: each
    /// purchase granted once and finished once, a restore answered "already granted" wherever it lands, a refund that
    /// overtakes its purchase judged as a refund.
    @Test func topicsGrownMidStreamMoveUsersToNewPartitionsAndLoseNothing() async throws {
        let broker = try await GrowableBroker.start()
        defer { broker.stop() }
        let servers = broker.bootstrapServers
        let pki = try TestPKI.make()
        let pipeline = try await PipelineTests.start(servers: servers, pki: pki, storeURL: try await StoreEngine.sqlite.freshURL())
        let consumers = pipeline.runners.flatMap(\.consumers)
        var watch = GroupWatchdog<ContinuousClock>.Configuration()
        // The workers' default; well above the time a member takes to join on this broker (about 25 s: every group write
        // goes through S3), or rejoining members would keep each other from ever completing a rebalance.
        watch.bound = .seconds(60)
        watch.interval = .seconds(1)
        let metrics = MetricsRegistry()
        let watchdog = GroupWatchdog(consumers: consumers, configuration: watch, clock: ContinuousClock(), logger: Logger(stage: "test", minimum: .error),
                                     metrics: metrics, describe: GroupWatchdog<ContinuousClock>.describing(with: try KafkaAdmin(kafka: .init(["bootstrap.servers": servers]))))
        let watching = Task { try await watchdog.run() }
        let users: [UserID] = (0..<16).map { "grow-user-\($0)" }
        let refunded = Set((0..<4).map { TransactionID("\(9_100_000 + $0)") })
        do {
            let signer = JWSSigner(pki: pki)
            let first = try users.indices.map { try signer.sign(AppStorePayloads.transaction(transactionId: "\(9_100_000 + $0)", productId: "coins.100",
                                                                                                bundleId: PipelineTests.bundle)) }
            let second = try users.indices.map { try signer.sign(AppStorePayloads.transaction(transactionId: "\(9_200_000 + $0)", productId: "coins.100",
                                                                                                 bundleId: PipelineTests.bundle)) }
            func submission(_ jws: String, _ user: UserID, _ source: SubmissionSource = .client) throws -> KafkaProducerMessage {
                try pipeline.codec.message(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws, userId: user,
                                                             submittedAt: Date(), source: source), time: Date())
            }
            func send(_ messages: [KafkaProducerMessage]) async throws -> [KafkaDeliveryReport] {
                // A producer of its own each time: a new one reads the partition count afresh.
                let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
                return try await producer.send(contentsOf: messages).map { try $0.get() }
            }

            // Each user's first purchase, on four partitions; the topics grow while they flow.
            let before = try await send(try users.indices.map { try submission(first[$0], users[$0]) })
            #expect(Set(before.map(\.partition)).isSubset(of: 0..<4))
            try await broker.grow(EventCodec.pipelineTopics(prefix: pipeline.codec.topicPrefix), to: 8)

            // Then each user's second purchase and a restore of the first, and refunds of four users' first purchases.
            var later = try users.indices.map { try submission(second[$0], users[$0]) }
            later += try users.indices.map { try submission(first[$0], users[$0], .restore) }
            let after = try await send(later)
            let refunds = try (0..<4).map { index in
                let payload = AppStorePayloads.notification(type: .refund, bundleId: PipelineTests.bundle, appAppleId: nil, signedTransactionInfo: first[index])
                return try pipeline.codec.message(StoreNotificationReceived(signedPayload: try signer.sign(payload), receivedAt: Date()), time: Date())
            }
            _ = try await send(refunds)
            // The moved users' second purchases are on the new partitions only: finished, they show the stages took those up.
            let moved = users.indices.filter { before[$0].partition != after[$0].partition }
            #expect(!moved.isEmpty, "some user's later submissions land on a new partition")
            #expect(moved.allSatisfy { after[$0].partition >= 4 && after[$0].partition == after[users.count + $0].partition })

            // Each stage's groups take a minute to find their slice stale and rejoin, at about 25 s a join on this broker: 145 to
            // 235 s alone, more in a full test run (over 420 s once, on a slow day of the host, in a CI run whose other
            // tests ran beside it).
            try await waitUntil("every purchase has its outcome", timeout: .seconds(600)) {
                for index in users.indices {
                    guard try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: "\(9_200_000 + index)"))?.state == .finished else {
                        return false
                    }
                    let firstState = try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: "\(9_100_000 + index)"))?.state
                    guard firstState == (index < 4 ? .revoked : .finished) else { return false }
                }
                return true
            }
            watchdog.triggerGracefulShutdown()
            try await watching.value
            try await pipeline.stop()

        } catch {
            // Stop what runs against the broker before it goes, or it retries for the rest of the test run.
            watchdog.triggerGracefulShutdown()
            do { try await pipeline.stop() } catch let cleanup { Issue.record("stopping the pipeline after the failure: \(cleanup)") }
            throw error
        }
        for (index, user) in users.enumerated() {
            #expect(try await pipeline.store.balances(of: user) == ["coins": index < 4 ? 100 : 200], "\(user)")
        }
        let finished = pipeline.appStore.finished
        #expect(finished.count == Set(finished).count, "no purchase finished twice with the store: \(finished)")
        let expected = Set(users.indices.map { TransactionID("\(9_200_000 + $0)") } + (4..<users.count).map { TransactionID("\(9_100_000 + $0)") })
        #expect(expected.isSubset(of: Set(finished)) && Set(finished).subtracting(expected).isSubset(of: refunded))
        let audit = try await pipeline.store.audit()
        #expect(audit.balanceMismatches.isEmpty && audit.finishedWithoutGrant.isEmpty, "\(audit.balanceMismatches) \(audit.finishedWithoutGrant)")
    }
}

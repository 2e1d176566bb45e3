import Foundation
import JSONSchema
@testable import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import Testing
import TestSupport
import WorkerRuntime

/// A granter batch whose outputs are only partly acknowledged when its worker crashes, on librdkafka's mock cluster:
/// `item.granted` has two partitions and one of them has no leader, so the outputs of some users are acknowledged and
/// the others wait. The input's committed offset stops at the first message whose output is unacknowledged, not past
/// it and not short of it; after the crash a new member handles the rest again, each purchase granted once.
@Suite(.timeLimit(.minutes(3)))
struct PartialAcknowledgementTests {
    struct Output: Sendable {
        var transactionId: TransactionID
        var already: Bool
    }

    @Test func aBatchPartlyAcknowledgedIsHandledAgainWithoutASecondGrantOrAnOffsetPastTheGap() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let servers = cluster.bootstrapServers
        let prefix = "pa\(UUID().uuidString.prefix(6).lowercased())."
        let codec = EventCodec(schemas: PipelineTests.schemas, source: "/iap-pipeline/granter", topicPrefix: prefix)
        for topic in EventCodec.pipelineTopics(prefix: prefix) {
            try cluster.createTopic(topic, partitions: topic == codec.topic(.itemGranted) ? 2 : 1)
        }
        let store = try SQLPurchaseStore(url: try await StoreEngine.sqlite.freshURL())
        try await store.migrate()
        let catalog = try ProductCatalog(contentsOf: TestServices.packageRoot.appendingPathComponent("schemas/examples/catalog.json"),
                                         schemas: PipelineTests.schemas)
        let now = Date()
        let users: [UserID] = (0..<12).map { "user-\($0)" }
        for (index, user) in users.enumerated() {
            #expect(try await store.recordVerified(PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "\(9_000_000 + index)"), userId: user,
                                                                  productId: "coins.100", productType: .consumable, quantity: 1, purchaseTime: now), at: now) == .recorded)
        }
        let inputs = try users.enumerated().map { index, user in
            try codec.message(PurchaseVerifiedEvent(store: .appstore, transactionId: "\(9_000_000 + index)", productId: "coins.100", productType: "consumable",
                                                    quantity: 1, userId: user, purchaseDate: now, source: .client, verifiedAt: now), time: now)
        }
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        for result in await producer.send(contentsOf: inputs) { _ = try result.get() } // sent before the granter starts: one batch
        let blocked = TopicPartition(topic: codec.topic(.itemGranted), partition: 1)
        try cluster.setPartitionLeader(topic: blocked.topic, partition: blocked.partition, broker: -1)

        // What reaches item.granted: transaction id and whether it answered "already granted".
        let outputs = Locked<[Output]>([])
        let reader = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: prefix + "reader", topics: [blocked.topic]))
        let reading = Task {
            try await reader.run { message in
                if case .success(let granted) = codec.decode(message, as: ItemGranted.self) {
                    outputs.withLock { $0.append(Output(transactionId: granted.transactionId, already: granted.alreadyGranted)) }
                }
            }
        }
        defer { reader.triggerGracefulShutdown() }

        let group = prefix + "granter"
        let input = TopicPartition(topic: codec.topic(.purchaseVerified), partition: 0)
        func runner() throws -> (StageRunner, KafkaConsumer) {
            let context = StageContext(codec: codec, logger: Logger(stage: "granter", minimum: .error))
            let stage = GranterStage(context: context, store: store, catalog: catalog, clawBackDueRefunds: true)
            let consumer = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: stage.topics,
                                                                  maxInFlightPerPartition: 64))
            let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers, "log_level": "0"])))
            return (StageRunner(stage: stage, consumer: consumer, producer: producer, deadLetters: EventDeadLetters(codec: codec), logger: context.logger),
                    consumer)
        }
        /// The offset of the first input whose output has not reached item.granted (the batch's gap).
        func firstUnacknowledged() -> Int64 {
            let arrived = Set(outputs.withLock { $0.map(\.transactionId) })
            return Int64((0..<users.count).first { !arrived.contains("\(9_000_000 + $0)") } ?? users.count)
        }

        let (first, firstConsumer) = try runner()
        let firstRun = Task { try await first.run() }
        try await waitUntil("the batch is granted") { try await store.statistics().purchasesByState[.granted] == users.count }
        try await waitUntil("the committed offset reaches the first unacknowledged output", timeout: .seconds(30)) {
            let gap = firstUnacknowledged()
            let committed = try committedOffsets(servers, group: group, [input])[input] ?? -1
            return gap < users.count && committed == gap
        }
        #expect(first.counters.withLock { $0["batches"] ?? 0 } >= 1, "the twelve waiting messages were handled as a batch")
        firstConsumer.simulateCrash()
        let gap = firstUnacknowledged()
        #expect(gap > 0 || outputs.withLock { !$0.isEmpty }, "some outputs were acknowledged, some not: \(outputs.withLock { $0 })")
        #expect(try committedOffsets(servers, group: group, [input])[input] == gap, "no offset past the unacknowledged output")

        try cluster.setPartitionLeader(topic: blocked.topic, partition: blocked.partition, broker: 1)
        let (second, _) = try runner()
        let secondRun = Task { try await second.run() }
        try await waitUntil("the rest is handled again", timeout: .seconds(90)) {
            second.counters.withLock { $0["handled"] ?? 0 } >= users.count - Int(gap)
        }
        try await waitUntil("every purchase has its item.granted") { firstUnacknowledged() == users.count }
        try await waitUntil("the purchases handled again are answered already granted") {
            let again = Set(outputs.withLock { $0 }.filter(\.already).map(\.transactionId))
            return (Int(gap)..<users.count).allSatisfy { again.contains("\(9_000_000 + $0)") }
        }
        second.triggerGracefulShutdown()
        try await secondRun.value
        firstRun.cancel()

        let audit = try await store.audit()
        for index in users.indices {
            #expect(audit.purchases[PurchaseKey(store: .appstore, transactionId: "\(9_000_000 + index)")]?.grantEntries == 1, "granted once")
        }
        #expect(audit.balanceMismatches.isEmpty)
        for user in users { #expect(try await store.balances(of: user) == ["coins": 100], "\(user)") }
        let firstAnswers = outputs.withLock { $0 }.filter { !$0.already }.map(\.transactionId)
        #expect(Set(firstAnswers).count == firstAnswers.count, "never two answers of a first grant: \(firstAnswers)")
        reading.cancel()
    }
}

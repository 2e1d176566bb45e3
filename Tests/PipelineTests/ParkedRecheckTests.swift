import Foundation
import Kafka
import PurchaseEvents
import PurchaseStore
import Stages
import Testing
import TestSupport
import WorkerApp
import WorkerRuntime

/// A message answered `.recheck` (a payment still pending) has that answer published once: the first time the stage
/// gives it, on the input side or when re-driven from parking (after its retry budget ran out, or behind a parked
/// message of its key), and never again on later re-checks, also once the parked budget is spent. On librdkafka's
/// mock cluster, with the parking ledger in SQLite.
@Suite(.timeLimit(.minutes(8)))
struct ParkedRecheckTests {
    /// Fails transiently for `failing` values until the ledger has them parked; then, like every other value, answers
    /// "pending" on `answers` and asks to be handed back. `stumbling` values fail transiently once after their first
    /// answer. Counts its answers per value.
    struct PendingStage: MessageStage {
        let name = "pending"
        let topics: [String]
        let answerTopic: String
        let failing: Set<String>
        let stumbling: Set<String>
        let stumbled = Locked<Set<String>>([])
        let store: SQLPurchaseStore
        let parkedOnce: Locked<Set<String>>
        let answers: Locked<[String: Int]>

        func handle(_ message: KafkaMessage) async throws -> StageResult {
            let value = String(decoding: message.value ?? Data(), as: UTF8.self)
            if failing.contains(value) && !parkedOnce.value.contains(value) {
                guard try await StoreParkingLedger(store: store).parkedToken(ParkedOrigin(stage: name, topic: message.topic, partition: message.partition, offset: message.offset)) != nil else {
                    throw TransientError("the AppCoins API is down")
                }
                parkedOnce.withLock { _ = $0.insert(value) }
            }
            if stumbling.contains(value) && answers.value[value] == 1 && stumbled.withLock({ $0.insert(value).inserted }) {
                throw TransientError("the AppCoins API is down for a moment")
            }
            answers.withLock { $0[value, default: 0] += 1 }
            return .recheck(publish: [KafkaProducerMessage(topic: answerTopic, key: message.key, value: Data("pending:\(value)".utf8))],
                            after: .milliseconds(100))
        }
    }

    /// The store's ledger, whose re-driver waits until the test opens `redriving`: p1 is re-driven only once p2 is
    /// parked behind it, however slow the machine.
    struct GatedLedger: ParkingLedger {
        let ledger: StoreParkingLedger
        let redriving: Gate

        func recordParked(_ origin: ParkedOrigin, key: OrderingKey?, recheck: Bool, token: String, reason: String, at: Date) async throws {
            try await ledger.recordParked(origin, key: key, recheck: recheck, token: token, reason: reason, at: at)
        }
        func parked(stage: String, key: OrderingKey) async throws -> [ParkedOrigin] { try await ledger.parked(stage: stage, key: key) }
        func parkedKeys(stage: String, among keys: Set<OrderingKey>) async throws -> Set<OrderingKey> { try await ledger.parkedKeys(stage: stage, among: keys) }
        func parkedToken(_ origin: ParkedOrigin) async throws -> String? {
            await redriving.wait() // only the re-driver asks
            return try await ledger.parkedToken(origin)
        }
        func releaseParked(_ origin: ParkedOrigin) async throws { try await ledger.releaseParked(origin) }
    }

    /// p1 fails until parked past its retry budget, p2 (same key) is parked behind it, c1 is answered at once; all three
    /// stay pending; c1's first re-check fails transiently. `budgetSpent`: the parked budget is over at the first re-drive,
    /// which ends the re-checks (and would dead-letter a failure: c1 does not fail).
    @Test(arguments: [false, true])
    func aPendingAnswerIsPublishedOnceWhereverTheStageFirstGivesIt(budgetSpent: Bool) async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let servers = cluster.bootstrapServers
        let prefix = "pr\(UUID().uuidString.prefix(6).lowercased())."
        let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test", topicPrefix: prefix)
        let input = prefix + "submissions", answerTopic = prefix + "answers"
        for topic in [input, answerTopic, codec.retryTopic, codec.topic(.deadLetter)] { try cluster.createTopic(topic, partitions: 1) }
        let store = try SQLPurchaseStore(url: try await StoreEngine.sqlite.freshURL())
        try await store.migrate()
        let stage = PendingStage(topics: [input], answerTopic: answerTopic, failing: ["p1"],
                                 stumbling: budgetSpent ? [] : ["c1"], store: store, parkedOnce: Locked([]), answers: Locked([:]))

        let published = Recorder()
        let reader = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: prefix + "reader",
                                                                             topics: [answerTopic]))) { await published.record($0) }
        var configuration = StageRunner.Configuration()
        configuration.initialBackoff = .milliseconds(50)
        configuration.maxBackoff = .milliseconds(100)
        configuration.retryBudget = .milliseconds(300)
        configuration.parkedDelay = .milliseconds(300)
        configuration.maxParkedDelay = .milliseconds(500)
        configuration.parkedBudget = budgetSpent ? .zero : .seconds(86_400)
        let redriving = Gate()
        let group = prefix + stage.name
        let retryConsumer = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group + "-retry", topics: [codec.retryTopic]))
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers, "log_level": "0"])))
        let runner = StageRunner(stage: stage, consumer: try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: [input])),
                                 producer: producer, deadLetters: EventDeadLetters(codec: codec), logger: Logger(stage: stage.name, minimum: .error),
                                 configuration: configuration,
                                 parking: Parking(ledger: GatedLedger(ledger: StoreParkingLedger(store: store), redriving: redriving),
                                                  consumer: retryConsumer, topic: codec.retryTopic))
        let running = Task { try await runner.run() }

        let submissions = [("a", "p1"), ("c", "c1"), ("a", "p2")].map { KafkaProducerMessage(topic: input, key: Data($0.0.utf8), value: Data($0.1.utf8)) }
        for result in await producer.send(contentsOf: submissions) { _ = try result.get() }
        // Seconds alone; with the whole suite on two cores, more than a minute has been seen.
        try await waitUntil("p1 is parked past its retry budget and p2 behind it", timeout: .seconds(240)) { runner.counters.withLock { $0["parked"] ?? 0 } == 2 }
        await redriving.open()
        if budgetSpent {
            // Each is re-driven once: answered (p1, p2) or found still pending (c1), and released.
            try await waitUntil("all three are re-driven and released") { runner.counters.withLock { $0["redriven"] ?? 0 } == 3 }
            #expect(stage.answers.value == ["p1": 1, "p2": 1, "c1": 2])
        } else {
            // A handling begins after the one before it was published and parked again: the third means two re-drives done.
            try await waitUntil("each was answered and asked about again twice") {
                let answers = stage.answers.value
                return answers.count == 3 && answers.values.allSatisfy { $0 >= 3 }
            }
            #expect(stage.stumbled.value == ["c1"], "c1 was parked again failing, after it was answered")
        }

        // Everything published so far is on the answers topic ahead of this marker.
        for result in await producer.send(contentsOf: [KafkaProducerMessage(topic: answerTopic, key: nil, value: Data("marker".utf8))]) { _ = try result.get() }
        try await waitUntil("the reader reached the marker") { await published.values.contains("marker") }
        let answers = await published.values.filter { $0 != "marker" }
        #expect(answers.sorted() == ["pending:c1", "pending:p1", "pending:p2"], "each pending answer published once: \(answers)")

        runner.triggerGracefulShutdown()
        try await running.value
        try await reader.stop()
    }
}

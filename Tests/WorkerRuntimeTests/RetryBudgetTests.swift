import Foundation
import JSONSchema
import Kafka
import PurchaseEvents
import Testing
import TestSupport
import WorkerRuntime

/// A message that keeps failing transiently is parked once its retry budget is spent: the partition moves on,
/// later messages of its key wait behind it, and the re-driver hands it back to the stage once it can succeed.
@Suite(TestServices.broker, .timeLimit(.minutes(3)))
struct RetryBudgetTests {
    /// Fails transiently for messages whose value starts with "a" while `healthy` is false.
    struct FlakyStage: MessageStage {
        let name = "flaky"
        let topics: [String]
        let healthy: Locked<Bool>
        let handled: Locked<[String]>

        func handle(_ message: KafkaMessage) async throws -> StageResult {
            let value = String(decoding: message.value ?? Data(), as: UTF8.self)
            if value.hasPrefix("a") && !healthy.value { throw TransientError("the store is down") }
            handled.withLock { $0.append(value) }
            return .publish([])
        }
    }

    @Test func aMessageFailingPastItsBudgetIsParkedItsKeyWaitsAndItIsRedrivenInOrder() async throws {
        let servers = try TestServices.requireBrokers()
        let prefix = uniqueName("rb") + "."
        let codec = EventCodec(schemas: try JSONSchemaRegistry(directory: TestServices.packageRoot.appendingPathComponent("schemas")), source: "/test",
                               topicPrefix: prefix)
        let input = prefix + "input"
        try KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).createTopics([input, codec.retryTopic], partitions: 1)
        let stage = FlakyStage(topics: [input], healthy: Locked(false), handled: Locked([]))
        var configuration = StageRunner.Configuration()
        configuration.initialBackoff = .milliseconds(50)
        configuration.maxBackoff = .milliseconds(200)
        configuration.retryBudget = .seconds(1)
        configuration.parkedDelay = .milliseconds(300)
        let group = uniqueName("g")
        let runner = StageRunner(
            stage: stage, consumer: try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: [input])),
            producer: try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers]))), codec: codec,
            logger: Logger(stage: "flaky", minimum: .error), configuration: configuration,
            retryConsumer: try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group + "-retry", topics: [codec.retryTopic])))
        let running = Task { try await runner.run() }

        // One partition: user-1's purchase fails, user-2's comes next, then user-1's next event.
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        let messages = [("user-1", "a1"), ("user-2", "b"), ("user-1", "c1")].map { KafkaProducerMessage(topic: input, key: $0.0, value: Data($0.1.utf8)) }
        for result in await producer.send(contentsOf: messages) { _ = try result.get() }

        try await waitUntil("user-2's event handled past the failing one, and user-1's next parked behind it") {
            stage.handled.value == ["b"] && runner.counters.withLock { $0["parked", default: 0] } == 2
        }
        stage.healthy.withLock { $0 = true }
        try await waitUntil("the parked events re-driven, in their order") { stage.handled.value == ["b", "a1", "c1"] }
        runner.triggerGracefulShutdown()
        try await running.value
        #expect(stage.handled.value == ["b", "a1", "c1"], "each handled once")
    }
}

import Foundation
@testable import Kafka
import PurchaseEvents
import Stages
import Testing
import TestSupport
import WorkerRuntime

/// A key's outputs keep the order of its inputs when a delivery fails, on librdkafka's mock cluster: u1's output times
/// out in an outage (produce requests refused for longer than `message.timeout.ms`), u2 (same key, handled while u1's
/// output waited) has its output delivered once the outage is over, and u1's is then sent again. u2's output follows it
/// again: the last output of the key on the topic is u2's.
@Suite(.timeLimit(.minutes(3)))
struct OutputOrderTests {
    /// Publishes `out:<value>`. u1's handling waits until u2 is fetched (so that the runner takes it before it awaits
    /// u1's acknowledgement), u2's until `gate` opens. Records which values it began handling.
    struct EchoStage: MessageStage {
        let name = "echo"
        let topics: [String]
        let outputTopic: String
        let gate: Gate
        let handling: Locked<[String]>
        let nextFetched: @Sendable () -> Bool

        func handle(_ message: KafkaMessage) async throws -> StageResult {
            let value = String(decoding: message.value ?? Data(), as: UTF8.self)
            handling.withLock { $0.append(value) }
            if value == "u1" {
                while !nextFetched() { try await Task.sleep(for: .milliseconds(10)) }
            }
            if value == "u2" { await gate.wait() }
            return .publish([KafkaProducerMessage(topic: outputTopic, key: message.key, value: Data("out:\(value)".utf8))])
        }
    }

    @Test func anOutputSentAgainAfterItsDeliveryFailedIsFollowedAgainByTheLaterOutputsOfItsPartition() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let servers = cluster.bootstrapServers
        let prefix = "oo\(UUID().uuidString.prefix(6).lowercased())."
        let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test", topicPrefix: prefix)
        let input = prefix + "input", output = prefix + "output"
        for topic in [input, output, codec.topic(.deadLetter)] { try cluster.createTopic(topic, partitions: 1) }
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers, "log_level": "0"])))
        for result in await producer.send(contentsOf: ["u1", "u2"].map { KafkaProducerMessage(topic: input, key: "u", value: Data($0.utf8)) }) {
            _ = try result.get()
        }

        let published = Recorder()
        let reader = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: prefix + "reader",
                                                                             topics: [output]))) { await published.record($0) }
        let consumer = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: prefix + "echo", topics: [input],
                                                              maxInFlightPerPartition: 64))
        let stage = EchoStage(topics: [input], outputTopic: output, gate: Gate(), handling: Locked([]),
                              nextFetched: { consumer.waitingMessages(TopicPartition(topic: input, partition: 0)) > 0 })
        var configuration = StageRunner.Configuration()
        configuration.initialBackoff = .milliseconds(50)
        configuration.maxBackoff = .milliseconds(100)
        configuration.maxBatch = 1 // u1 alone: its output is enqueued before u2 is taken
        let outputs = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers, "log_level": "0",
                                                                                        "message.timeout.ms": "1500"])))
        let runner = StageRunner(stage: stage, consumer: consumer, producer: outputs, deadLetters: EventDeadLetters(codec: codec),
                                 logger: Logger(stage: stage.name, minimum: .error), configuration: configuration)
        // The outage: every produce request refused (retriable), for longer than a record may wait.
        cluster.pushRequestErrors(.produce, Array(repeating: .notEnoughReplicas, count: 10_000))
        let running = Task { try await runner.run() }

        try await waitUntil("u2 is being handled, u1's output enqueued before") { stage.handling.value == ["u1", "u2"] }
        try await waitUntil("u1's output timed out in the outage") { outputs.undeliveredCount == 0 }
        cluster.clearRequestErrors(.produce)
        await stage.gate.open()
        try await waitUntil("both are handled, their outputs acknowledged") { runner.counters.withLock { $0["handled"] ?? 0 } == 2 }
        #expect(runner.counters.withLock { $0["retries"] ?? 0 } >= 1, "u1's output failed and was sent again")

        // Everything published so far is on the output topic ahead of this marker.
        for result in await producer.send(contentsOf: [KafkaProducerMessage(topic: output, key: "marker", value: Data("marker".utf8))]) {
            _ = try result.get()
        }
        try await waitUntil("the reader reached the marker") { await published.values.contains("marker") }
        let order = await published.values.filter { $0 != "marker" }
        #expect(order.last == "out:u2", "the key's last output is its last input's: \(order)")
        #expect(order.contains("out:u1"))

        runner.triggerGracefulShutdown()
        try await running.value
        try await reader.stop()
    }
}

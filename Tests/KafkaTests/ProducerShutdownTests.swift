import Foundation
import Kafka
import Testing
import TestSupport

/// What a producer could not deliver before it stopped is answered `.shutdown`, not left waiting.
@Suite(.timeLimit(.minutes(2)))
struct ProducerShutdownTests {
    @Test func whatAStoppedProducerCouldNotDeliverIsAnsweredShutdown() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic("unanswered", partitions: 1)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration([
            "bootstrap.servers": cluster.bootstrapServers, "log_level": "0", "message.timeout.ms": "300000",
        ])))
        // Delivered first, so that the partition's leader is known; then the broker goes down.
        _ = try await producer.send(KafkaProducerMessage(topic: "unanswered", key: "k", value: Data("up".utf8)))
        try cluster.setBrokerDown(1)
        let pending = await producer.enqueue(contentsOf: (0..<5).map { KafkaProducerMessage(topic: "unanswered", key: "k", value: Data("\($0)".utf8)) })
        let waiting = Task { await pending.results() }
        await producer.shutdown(flushTimeout: .milliseconds(200))
        let outcomes = await waiting.value
        #expect(outcomes.count == 5)
        for outcome in outcomes {
            guard case .failure(let error) = outcome else {
                Issue.record("delivered although the broker was down: \(outcome)")
                continue
            }
            #expect(error.code == .shutdown)
        }
    }
}

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
        // The partition has no leader before anything is sent to it, so the records wait for one. (Not the broker set
        // down, nor the leader taken away after a delivery: librdkafka's mock broker aborts the process on both.)
        try cluster.setPartitionLeader(topic: "unanswered", partition: 0, broker: -1)
        let pending = await producer.enqueue(contentsOf: (0..<5).map { KafkaProducerMessage(topic: "unanswered", key: "k", value: Data("\($0)".utf8)) })
        let waiting = Task { await pending.results() }
        await producer.shutdown(flushTimeout: .milliseconds(200))
        let outcomes = await waiting.value
        #expect(outcomes.count == 5)
        for outcome in outcomes {
            guard case .failure(let error) = outcome else {
                Issue.record("delivered although the partition had no leader: \(outcome)")
                continue
            }
            #expect(error.code == .shutdown)
        }
    }
}

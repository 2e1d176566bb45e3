import Foundation
import Kafka
import Testing
import TestSupport

/// Members joining and leaving a group with work in flight, on librdkafka's mock cluster (no local broker's quirks),
/// with the consumers' own group settings: nothing is lost, and what the leaving member handled is committed.
@Suite(.timeLimit(.minutes(8)))
struct MockClusterGroupTests {
    @Test func aMemberJoinsWithWorkInFlightThenTheFirstLeavesAndNothingIsLost() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let topic = "in"
        try cluster.createTopic(topic, partitions: 4)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": cluster.bootstrapServers, "log_level": "0"])))
        let total = 600
        for result in await producer.send(contentsOf: BrokerIntegrationTests.keyedMessages(topic: topic, count: total, keys: 60)) { _ = try result.get() }
        await producer.shutdown()

        let group = uniqueName("g")
        let handledBy = Locked<[String: [String]]>([:]) // value → the members that handled it
        let secondJoined = Locked(false)
        func member(_ name: String) throws -> (KafkaConsumer, Task<Void, any Error>) {
            let consumer = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(cluster.bootstrapServers), groupID: group, topics: [topic],
                                                                  maxBufferedPerPartition: 10, maxInFlightPerPartition: 8))
            // Pipelined like a stage: each message's completion takes a while, so a rebalance finds work in flight. Past
            // its 50th message the first member holds its completions until the second has joined (or its partitions are
            // revoked for that): work is left for the joining member, whatever the machine's speed.
            let task = Task {
                try await consumer.runPipelined { message in
                    let count = handledBy.withLock { handled in
                        handled[String(decoding: message.value ?? Data(), as: UTF8.self), default: []].append(name)
                        return handled.count
                    }
                    return {
                        try await Task.sleep(for: .milliseconds(20))
                        while name == "first" && count > 50 && !secondJoined.value && !KafkaConsumer.isHandlingRevokedPartition {
                            try await Task.sleep(for: .milliseconds(10))
                        }
                    }
                }
            }
            return (consumer, task)
        }
        let (first, firstTask) = try member("first")
        try await waitUntil("the first member is working", timeout: .seconds(240)) { handledBy.value.count >= 50 }
        let (second, secondTask) = try member("second")
        try await waitUntil("the second member got partitions", timeout: .seconds(240)) { !second.assignment.isEmpty }
        secondJoined.value = true
        #expect(handledBy.value.count < total, "the second member joined with work left")
        #expect(first.assignment.isDisjoint(with: second.assignment))

        first.triggerGracefulShutdown()
        try await firstTask.value
        try await waitUntil("the second member owns all four partitions", timeout: .seconds(240)) { second.assignment.count == 4 }
        try await waitUntil("every message is handled", timeout: .seconds(240)) { handledBy.value.count == total }
        second.triggerGracefulShutdown()
        try await secondTask.value

        let handled = handledBy.value
        #expect(handled.values.contains { $0.contains("second") }, "the joining member did work")
        let partitions = (0..<4).map { TopicPartition(topic: topic, partition: $0) }
        let committed = try committedOffsets(cluster.bootstrapServers, group: group, partitions)
        let consumer = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(cluster.bootstrapServers), groupID: group, topics: []))
        for partition in partitions {
            #expect(committed[partition] == (try consumer.watermarks(partition)).high, "\(partition): everything handled is committed")
        }
        // Some messages are handled twice: the mock coordinator refuses the commit a member makes when its partitions
        // are revoked (REBALANCE_IN_PROGRESS; Apache Kafka accepts it while the group prepares the rebalance), so the
        // next owner starts from the last auto-commit. At least once, as the stages expect; nothing lost.
    }
}

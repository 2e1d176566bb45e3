import Foundation
import Kafka
import Testing
import TestSupport

/// Producer and consumer against a real Kafka-protocol broker over TCP (Tansu under `make test`).
@Suite(TestServices.broker, .timeLimit(.minutes(5)))
struct BrokerIntegrationTests {
    /// 10,000 keyed records for 100 keys, each key's records numbered 0, 1, 2, …
    static func keyedMessages(topic: String, count: Int = 10_000, keys: Int = 100) -> [KafkaProducerMessage] {
        (0..<count).map { index in
            let key = "user-\(index % keys)"
            return KafkaProducerMessage(topic: topic, key: key, value: Data("\(key):\(index / keys)".utf8))
        }
    }

    @Test func tenThousandKeyedMessagesArriveOnceInPartitionOrderAndAreCommitted() async throws {
        let servers = try TestServices.requireBrokers()
        let topic = uniqueName("ten-thousand")
        try await KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).createTopics([topic], partitions: 4)

        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        let results = await producer.send(contentsOf: Self.keyedMessages(topic: topic))
        let reports = try results.map { try $0.get() }
        #expect(Set(reports.map { TopicPartition(topic: $0.topic, partition: $0.partition) }).count == 4)
        await producer.shutdown()

        let recorder = Recorder()
        let consumer = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: uniqueName("g"), topics: [topic]))
        let running = RunningConsumer(consumer) { await recorder.record($0) }
        try await waitUntil("10,000 messages are handled") { await recorder.count >= 10_000 }
        try await running.stop()

        let messages = await recorder.messages
        #expect(messages.count == 10_000, "no message twice")
        #expect(Set(messages.map(\.value)).count == 10_000, "no message lost")
        // Per partition, offsets were handled in increasing order; per key, the producer's order holds.
        for (_, handled) in Dictionary(grouping: messages, by: \.partition) {
            #expect(handled.map(\.offset) == handled.map(\.offset).sorted())
        }
        for (key, handled) in Dictionary(grouping: messages, by: { $0.key! }) {
            let sequence = handled.map { Int(String(decoding: $0.value!, as: UTF8.self).split(separator: ":")[1])! }
            #expect(sequence == Array(0..<100), "order of \(String(decoding: key, as: UTF8.self))")
        }
        // Shutdown committed exactly past the last handled message of each partition.
        let partitions = (0..<4).map { TopicPartition(topic: topic, partition: Int32($0)) }
        let committed = try committedOffsets(servers, group: consumer.groupID, partitions)
        for partition in partitions {
            let last = messages.filter { $0.partition == partition.partition }.map(\.offset).max()
            #expect(committed[partition] == last.map { $0 + 1 }, "committed offset of \(partition)")
        }
    }

    @Test func twoConsumersInOneGroupSplitThePartitions() async throws {
        let servers = try TestServices.requireBrokers()
        let topic = uniqueName("split")
        let group = uniqueName("g")
        try await KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).createTopics([topic], partitions: 4)
        let recorder = Recorder()
        let first = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: [topic]))) {
            await recorder.record($0)
        }
        try await waitUntil("the first member owns all 4 partitions") { first.consumer.assignment.count == 4 }
        let second = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: [topic]))) {
            await recorder.record($0)
        }
        try await waitUntil("both members own partitions") {
            !first.consumer.assignment.isEmpty && !second.consumer.assignment.isEmpty
                && first.consumer.assignment.union(second.consumer.assignment).count == 4
        }
        #expect(first.consumer.assignment.isDisjoint(with: second.consumer.assignment))

        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        for result in await producer.send(contentsOf: Self.keyedMessages(topic: topic, count: 400, keys: 40)) { _ = try result.get() }
        try await waitUntil("400 messages are handled") { await recorder.count >= 400 }
        let byPartition = Dictionary(grouping: await recorder.messages, by: \.partition)
        #expect(byPartition.count == 4)
        #expect(Set(await recorder.values).count == 400)
        try await first.stop()
        try await second.stop()
    }

    @Test func messagesOfAMemberThatStopsWithoutCommittingAreRedelivered() async throws {
        let servers = try TestServices.requireBrokers()
        let topic = uniqueName("redeliver")
        let group = uniqueName("g")
        try await KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).createTopics([topic], partitions: 2)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        for result in await producer.send(contentsOf: Self.keyedMessages(topic: topic, count: 200, keys: 20)) { _ = try result.get() }

        // The first member handles 50 messages, then hangs in its handler: it can never commit that one.
        let stuck = Recorder()
        let gate = Gate()
        var configuration = KafkaConsumer.Configuration(kafka: testConsumerKafka(servers), groupID: group, topics: [topic])
        configuration.shutdownTimeout = .seconds(1)
        let first = RunningConsumer(try KafkaConsumer(configuration: configuration)) { message in
            if await stuck.count >= 50 { await gate.wait() }
            await stuck.record(message)
        }
        try await waitUntil("the first member handled 50") { await stuck.count >= 50 }
        try await first.stop() // Abandons the hung handler after 1 s, commits the 50, leaves the group.

        let second = Recorder()
        let other = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: [topic]))) {
            await second.record($0)
        }
        try await waitUntil("the second member handled the rest") { await second.count >= 150 }
        try await other.stop()
        await gate.open()

        let handledByFirst = Set(await stuck.values)
        let handledBySecond = Set(await second.values)
        #expect(handledByFirst.count == 50)
        #expect(handledByFirst.union(handledBySecond).count == 200, "no message lost")
        #expect(handledByFirst.isDisjoint(with: handledBySecond), "what was committed is not redelivered")
    }

    @Test func pausedPartitionIsHeldBackUntilResumed() async throws {
        let servers = try TestServices.requireBrokers()
        let topic = uniqueName("pause")
        try await KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).createTopics([topic], partitions: 2)
        let held = TopicPartition(topic: topic, partition: 0)
        let recorder = Recorder()
        let consumer = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: uniqueName("g"), topics: [topic]))
        try consumer.pause(held)
        let running = RunningConsumer(consumer) { await recorder.record($0) }

        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        let batch = (0..<40).map { KafkaProducerMessage(topic: topic, partition: Int32($0 % 2), key: nil, value: Data("m\($0)".utf8)) }
        for result in await producer.send(contentsOf: batch) { _ = try result.get() }
        // The other partition flows while partition 0 is paused.
        try await waitUntil("partition 1 is handled") { await recorder.count >= 20 }
        // A second group reading everything proves partition 0's messages are there to be fetched.
        let witness = Recorder()
        let reader = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: uniqueName("w"), topics: [topic]))) {
            await witness.record($0)
        }
        try await waitUntil("the witness read both partitions") { await witness.count >= 40 }
        try await reader.stop()
        #expect(await recorder.messages.allSatisfy { $0.partition == 1 }, "nothing of the paused partition was handled")

        try consumer.resume(held)
        try await waitUntil("partition 0 is handled after resume") { await recorder.count >= 40 }
        try await running.stop()
        #expect(Set(await recorder.values).count == 40)
    }

    @Test func headersKeysAndTombstonesRoundTrip() async throws {
        let servers = try TestServices.requireBrokers()
        let topic = uniqueName("headers")
        try await KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).createTopics([topic], partitions: 1)
        let headers = [
            KafkaHeader(key: "ce_specversion", string: "1.0"),
            KafkaHeader(key: "ce_id", string: "granted:appstore:2000000123"),
            KafkaHeader(key: "binary", value: Data([0, 255, 10, 13])),
            KafkaHeader(key: "empty", value: Data()),
            KafkaHeader(key: "null", value: nil),
        ]
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        try await producer.send(KafkaProducerMessage(topic: topic, key: "user-1", value: Data("{}".utf8), headers: headers))
        try await producer.send(KafkaProducerMessage(topic: topic, key: "user-1", value: nil)) // tombstone
        try await producer.send(KafkaProducerMessage(topic: topic, key: nil, value: Data("no key".utf8)))

        let recorder = Recorder()
        let running = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: uniqueName("g"), topics: [topic]))) {
            await recorder.record($0)
        }
        try await waitUntil("3 messages are handled") { await recorder.count >= 3 }
        try await running.stop()
        let messages = await recorder.messages
        #expect(messages[0].headers == headers)
        #expect(messages[0].header("ce_id") == "granted:appstore:2000000123")
        #expect(messages[0].key == Data("user-1".utf8))
        #expect(messages[1].value == nil, "a tombstone is delivered with a nil value")
        #expect(messages[1].headers.isEmpty)
        #expect(messages[2].key == nil)
        #expect(messages.allSatisfy { $0.timestamp != nil })
    }

    @Test func aHandlerErrorStopsTheConsumerWithoutCommittingPastIt() async throws {
        let servers = try TestServices.requireBrokers()
        let topic = uniqueName("handler-error")
        let group = uniqueName("g")
        try await KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).createTopics([topic], partitions: 1)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        for result in await producer.send(contentsOf: (0..<10).map { KafkaProducerMessage(topic: topic, key: "k", value: Data("\($0)".utf8)) }) {
            _ = try result.get()
        }
        struct Poison: Error {}
        let consumer = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: [topic]))
        let error = await #expect(throws: KafkaError.self) {
            try await consumer.run { message in
                if message.offset == 6 { throw Poison() }
            }
        }
        #expect(error?.code == .handler)
        let committed = try committedOffsets(servers, group: group, [TopicPartition(topic: topic, partition: 0)])
        #expect(committed[TopicPartition(topic: topic, partition: 0)] == 6, "committed up to, not past, the failed message")
    }
}

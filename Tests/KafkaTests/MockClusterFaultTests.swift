import Foundation
@testable import Kafka
import Testing
import TestSupport

/// A consume → produce loop shaped like a pipeline stage (pipelined: outputs in flight while the next
/// messages are handled), on librdkafka's mock cluster with coordinator and leader faults injected.
@Suite(.timeLimit(.minutes(8)))
struct MockClusterFaultTests {
    private struct CompletionFailed: Error {}

    @Test func aPipelinedConsumerOverlapsCompletionsAndStoresOffsetsOnlyInOrder() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let topic = "pipelined"
        try cluster.createTopic(topic, partitions: 1)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": cluster.bootstrapServers])))
        for result in await producer.send(contentsOf: (0..<20).map { KafkaProducerMessage(topic: topic, key: "k", value: Data("\($0)".utf8)) }) {
            _ = try result.get()
        }
        let group = uniqueName("g")
        let consumer = try KafkaConsumer(configuration: .init(
            kafka: testConsumerKafka(cluster.bootstrapServers), groupID: group, topics: [topic], maxInFlightPerPartition: 4))
        let handled = Locked<[Int64]>([])
        let firstCompletion = Gate()
        let partition = TopicPartition(topic: topic, partition: 0)
        let running = Task {
            try await consumer.runPipelined { message in
                handled.withLock { $0.append(message.offset) }
                switch message.offset {
                case 0:
                    // The worker overlaps completions with input that is already there (with none waiting it
                    // completes first, rather than hold offsets back): let the fetched messages arrive.
                    try await waitUntil("offsets 1…3 are fetched") { consumer.waitingMessages(partition) >= 3 }
                    return { await firstCompletion.wait() }
                case 12: return { throw CompletionFailed() }
                default: return {}
                }
            }
        }
        // Offsets 1…3 are handled while offset 0's completion is outstanding; the window holds 4, so no more.
        try await waitUntil("four messages are in flight") { handled.value.count >= 4 }
        #expect(handled.value == [0, 1, 2, 3])
        await firstCompletion.open()

        let error = await #expect(throws: KafkaError.self) { try await running.value }
        #expect(error?.code == .handler)
        #expect(handled.value == Array(0...Int64(handled.value.count - 1)), "handled in offset order")
        #expect(handled.value.count <= 16, "at most the window past the failed message: \(handled.value)")
        let committed = try committedOffsets(cluster.bootstrapServers, group: group, [partition])
        #expect(committed[partition] == 12, "offsets up to the failed completion, none past it")
    }

    @Test func aStageLikeLoopRidesOutCoordinatorMovesLeaderChangesAndTimeouts() async throws {
        let cluster = try KafkaMockCluster(brokers: 3)
        try cluster.createTopic("in", partitions: 3, replicationFactor: 3)
        try cluster.createTopic("out", partitions: 3, replicationFactor: 3)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration([
            "bootstrap.servers": cluster.bootstrapServers, "log_level": "0", "linger.ms": "1",
            // See FailureTests.produceRequestErrorsAreRetriedWithoutLossOrDuplicates: the mock broker's
            // sequence checks are looser than Kafka's, so one request in flight keeps this about the faults.
            "max.in.flight.requests.per.connection": "1",
        ])))
        let total = 3_000
        let group = uniqueName("stage")
        try cluster.setGroupCoordinator(group: group, broker: 1)
        let handledCount = Locked<[String: Int]>([:])
        var configuration = KafkaConsumer.Configuration(
            kafka: testConsumerKafka(cluster.bootstrapServers), groupID: group, topics: ["in"], maxInFlightPerPartition: 16)
        configuration.kafka["log_level"] = "0"
        let consumer = try KafkaConsumer(configuration: configuration)
        let stage = Task {
            try await consumer.runPipelined { message in
                let value = String(decoding: message.value ?? Data(), as: UTF8.self)
                handledCount.withLock { $0[value, default: 0] += 1 }
                let pending = await producer.enqueue(contentsOf: [KafkaProducerMessage(topic: "out", key: message.key, value: message.value)])
                return {
                    for result in await pending.results() { _ = try result.get() }
                }
            }
        }
        let feeder = Task {
            for start in stride(from: 0, to: total, by: 100) {
                let batch = (start..<start + 100).map { KafkaProducerMessage(topic: "in", key: "user-\($0 % 40)", value: Data("\($0)".utf8)) }
                for result in await producer.send(contentsOf: batch) { _ = try result.get() }
            }
        }

        // A thousand messages take seconds alone; with the whole suite on two cores, more than a minute has been seen.
        try await waitUntil("a third is handled", timeout: .seconds(240)) { handledCount.value.count >= total / 3 }
        // The faults, mid-stream: commits and heartbeats answered NOT_COORDINATOR then the coordinator
        // moves; produce requests time out; partition leaders of both topics move.
        cluster.pushRequestErrors(.offsetCommit, [.notCoordinator, .requestTimedOut, .notCoordinator])
        cluster.pushRequestErrors(.heartbeat, [.notCoordinator, .notCoordinator])
        try cluster.setGroupCoordinator(group: group, broker: 2)
        cluster.pushRequestErrors(.produce, [.requestTimedOut, .notLeaderForPartition, .requestTimedOut])
        for partition in Int32(0)..<3 {
            try cluster.setPartitionLeader(topic: "in", partition: partition, broker: (partition + 1) % 3 + 1)
            try cluster.setPartitionLeader(topic: "out", partition: partition, broker: (partition + 2) % 3 + 1)
        }
        try await waitUntil("two thirds are handled", timeout: .seconds(240)) { handledCount.value.count >= 2 * total / 3 }
        try cluster.setGroupCoordinator(group: group, broker: 3)
        cluster.pushRequestErrors(.offsetCommit, [.notCoordinator])
        try await feeder.value
        try await waitUntil("every input is handled", timeout: .seconds(240)) { handledCount.value.count >= total }

        consumer.triggerGracefulShutdown()
        try await stage.value
        let partitions = (Int32(0)..<3).map { TopicPartition(topic: "in", partition: $0) }
        let committed = try committedOffsets(cluster.bootstrapServers, group: group, partitions)
        let reader = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(cluster.bootstrapServers), groupID: uniqueName("r"), topics: []))
        for partition in partitions {
            // Never past what was handled. Not necessarily all of it: librdkafka (2.8) re-sends an auto-commit that
            // was queued while the coordinator was unknown after a later manual commit, so the committed offset can
            // go back (seen here: 1000 after 1275). That costs the next owner repeats, which are idempotent; not loss.
            let high = try reader.watermarks(partition).high
            let offset = try #require(committed[partition], "something committed for \(partition)")
            #expect(offset > 0 && offset <= high, "\(partition): committed \(offset) of \(high)")
        }
        let repeated = handledCount.value.filter { $0.value > 1 }
        #expect(repeated.isEmpty, "no input handled twice: \(repeated.count)")

        let outputs = try await consumeValues(cluster.bootstrapServers, topic: "out", count: total)
        #expect(outputs.count == total, "no output twice")
        #expect(Set(outputs) == Set((0..<total).map(String.init)), "no output lost")
    }

    private func consumeValues(_ servers: String, topic: String, count: Int) async throws -> [String] {
        let recorder = Recorder()
        let running = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: uniqueName("o"), topics: [topic]))) {
            await recorder.record($0)
        }
        try await waitUntil("\(count) outputs are read") { await recorder.count >= count }
        try await running.stop()
        return await recorder.values
    }
}

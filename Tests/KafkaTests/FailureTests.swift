import Foundation
@testable import Kafka
import Testing
import TestSupport

/// Faults injected with librdkafka's in-process mock cluster (real protocol over loopback),
/// and an unreachable broker. These need no outside service.
@Suite(.timeLimit(.minutes(8)))
struct FailureTests {
    @Test func unreachableBrokerGivesAClearErrorWithinBoundedTime() throws {
        // Port 1 on loopback: nothing listens there, connections are refused at once.
        let admin = try KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": "127.0.0.1:1", "log_level": "0"]))
        let started = ContinuousClock.now
        let error = #expect(throws: KafkaError.self) { _ = try admin.metadata(timeout: .seconds(3)) }
        let elapsed = ContinuousClock.now - started
        #expect(error?.code == .connection)
        #expect(error?.isRetriable == true)
        #expect(error?.message.contains("127.0.0.1:1") == true, "the error names the address: \(String(describing: error))")
        #expect(elapsed < .seconds(10), "took \(elapsed)")
    }

    @Test func sendToUnreachableBrokerFailsAfterMessageTimeout() async throws {
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration([
            "bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": "1500", "log_level": "0",
        ])))
        let error = await #expect(throws: KafkaError.self) {
            try await producer.send(KafkaProducerMessage(topic: "t", key: "k", value: Data("v".utf8)))
        }
        #expect(error?.code == .delivery)
        #expect(error?.rdKafkaName == "_MSG_TIMED_OUT")
        #expect(error?.isRetriable == true)
    }

    @Test func brokerGoingDownAndUpMidStreamLosesNothing() async throws {
        let cluster = try KafkaMockCluster(brokers: 3)
        let topic = "down-up"
        try cluster.createTopic(topic, partitions: 3, replicationFactor: 1)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration([
            "bootstrap.servers": cluster.bootstrapServers, "log_level": "0",
        ])))
        let total = 3_000
        let delivered = Counter()
        let sender = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<total {
                    group.addTask {
                        try await producer.send(KafkaProducerMessage(topic: topic, key: "user-\(index % 30)", value: Data("\(index)".utf8)))
                        await delivered.increment()
                    }
                    if index % 500 == 499 { try await group.waitForAll() }
                }
                try await group.waitForAll()
            }
        }
        // Seconds alone; with the whole suite on two cores, more than a minute has been seen.
        try await waitUntil("a third is delivered", timeout: .seconds(240)) { await delivered.value >= total / 3 }
        try cluster.setBrokerDown(1)
        // Broker 1 leads some partitions: those stall, the client reports the lost connection.
        try await waitUntil("the producer notices the outage") {
            producer.drainErrors().contains { $0.rdKafkaName == "_TRANSPORT" || $0.rdKafkaName == "_ALL_BROKERS_DOWN" }
        }
        let deliveredDuringOutage = await delivered.value
        try cluster.setBrokerUp(1)
        try await sender.value
        #expect(await delivered.value == total)
        #expect(deliveredDuringOutage < total, "the outage happened mid-stream")

        let values = try await consumeAll(cluster.bootstrapServers, topic: topic, count: total)
        #expect(values.count == total, "idempotence: no record twice")
        #expect(Set(values).count == total, "nothing lost")
    }

    @Test func produceRequestErrorsAreRetriedWithoutLossOrDuplicates() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let topic = "produce-errors"
        try cluster.createTopic(topic, partitions: 1)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration([
            "bootstrap.servers": cluster.bootstrapServers, "log_level": "0", "linger.ms": "0",
            // The mock broker, unlike Kafka, accepts a batch after a gap in producer sequence numbers; with
            // several requests in flight a later batch's success then makes librdkafka count an earlier,
            // never-appended one as persisted. One request in flight keeps the test about retries.
            "max.in.flight.requests.per.connection": "1",
        ])))
        // Warm up so the idempotent producer has its id before the faults start.
        try await producer.send(KafkaProducerMessage(topic: topic, key: "k", value: Data("0".utf8)))
        cluster.pushRequestErrors(.produce, [.requestTimedOut, .notLeaderForPartition, .notEnoughReplicas, .requestTimedOut, .leaderNotAvailable])
        let batch = (1..<200).map { KafkaProducerMessage(topic: topic, key: "k", value: Data("\($0)".utf8)) }
        for result in await producer.send(contentsOf: batch) { _ = try result.get() }

        let values = try await consumeAll(cluster.bootstrapServers, topic: topic, count: 200)
        #expect(values == (0..<200).map(String.init), "every record once, in order")
    }

    /// Reads `count` records from `topic` with a fresh group and returns their values.
    private func consumeAll(_ servers: String, topic: String, count: Int) async throws -> [String] {
        let recorder = Recorder()
        let consumer = try KafkaConsumer(configuration: .init(
            kafka: KafkaConfiguration(["bootstrap.servers": servers, "log_level": "0"]), groupID: uniqueName("g"), topics: [topic],
            onEvent: { event in if ProcessInfo.processInfo.environment["DEBUG_EVENTS"] != nil { print("EVENT \(event)") } }))
        let running = RunningConsumer(consumer) { await recorder.record($0) }
        do {
            try await waitUntil("\(count) records are consumed") { await recorder.count >= count }
        } catch {
            let values = Set(await recorder.values)
            print("GOT \(values.count) missing: \((0..<count).map(String.init).filter { !values.contains($0) })")
            throw error
        }
        try await running.stop()
        return await recorder.values
    }
}

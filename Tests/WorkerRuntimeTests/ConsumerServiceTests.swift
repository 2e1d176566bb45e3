import Foundation
import Kafka
import Testing
import TestSupport
import WorkerRuntime

@Suite(TestServices.broker, .timeLimit(.minutes(3)))
struct ConsumerServiceTests {
    @Test func signalFinishesTheInFlightHandlerCommitsAndEndsTheService() async throws {
        let servers = try TestServices.requireBrokers()
        let topic = uniqueName("graceful")
        let group = uniqueName("g")
        try await KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).createTopics([topic], partitions: 1)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        for result in await producer.send(contentsOf: (0..<10).map { KafkaProducerMessage(topic: topic, key: "k", value: Data("\($0)".utf8)) }) {
            _ = try result.get()
        }

        let handled = Recorder()
        let inFlight = Gate()
        let release = Gate()
        let consumer = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: [topic]))
        let service = ConsumerService(consumer: consumer) { message in
            if message.offset == 3 {
                await inFlight.open()
                await release.wait()
            }
            await handled.record(message)
        }
        signal(SIGUSR2, SIG_IGN)
        let running = Task { try await ServiceGroup(services: [service], gracefulShutdownSignals: [SIGUSR2]).run() }
        await inFlight.wait()
        kill(getpid(), SIGUSR2)
        await release.open()
        try await running.value

        let offsets = await handled.messages.map(\.offset)
        #expect(offsets.contains(3), "the in-flight handler finished")
        #expect(offsets == Array(0..<Int64(offsets.count)), "handled in order, nothing skipped")
        let committed = try committedOffsets(servers, group: group, [TopicPartition(topic: topic, partition: 0)])
        #expect(committed[TopicPartition(topic: topic, partition: 0)] == Int64(offsets.count), "committed exactly what was handled")
    }
}

import Foundation
import Kafka
import PurchaseEvents
import Testing
import TestSupport

/// The producers' library: `EventPublisher` sends only what its schema accepts, and returns after the ack.
@Suite(TestServices.broker, .timeLimit(.minutes(2)))
struct EventPublisherTests {
    @Test func publishesValidEventsAndRefusesInvalidOnesWithoutSendingThem() async throws {
        let servers = try TestServices.requireBrokers()
        let prefix = uniqueName("pub") + "."
        let publisher = try EventPublisher(codec: EventCodec(schemas: EventCodecTests.schemas, source: "/test/publisher", topicPrefix: prefix),
                                           kafka: KafkaConfiguration(["bootstrap.servers": servers]))
        let first = PurchaseConsumed(store: .appstore, transactionId: "1", userId: "u-1", consumedAt: Date())
        let report = try await publisher.publish(first)
        #expect(report.topic == prefix + "iap.purchase.consumed")
        var invalid = first
        invalid.transactionId = ""
        await #expect(throws: EventPublisher.InvalidEvent.self) { try await publisher.publish(invalid) }
        let second = PurchaseConsumed(store: .appstore, transactionId: "2", userId: "u-1", consumedAt: Date())
        try await publisher.publish(second)
        await publisher.shutdown()

        let recorder = Recorder()
        let consumer = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: prefix + "check",
                                                                              topics: [prefix + "iap.purchase.consumed"]))) { await recorder.record($0) }
        try await waitUntil("both valid events arrive") { await recorder.count >= 2 }
        try await consumer.stop()
        let messages = await recorder.messages
        #expect(messages.count == 2, "the invalid one was never sent")
        #expect(messages.map { $0.header("ce_id") } == [first.eventID, second.eventID], "in order, one user's key")
        #expect(messages.allSatisfy { $0.header("ce_type") == "iap.purchase.consumed.v1" && $0.key == Data("u-1".utf8) })
    }
}

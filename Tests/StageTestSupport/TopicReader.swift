import Foundation
import Kafka
import PurchaseEvents
import Synchronization
import Testing

extension StageFixtures {
    /// The events of `type` on its topic at `bootstrapServers` (librdkafka's mock cluster in unit tests), read from the
    /// start by a consumer of a group of its own until `count` are in (or 120 s passed: a loaded machine joins groups slowly); each decoded as a stage decodes its
    /// input, so against its schema: one that does not decode is recorded as an issue.
    public static func events<Event: PipelineEvent>(_ type: Event.Type, atLeast count: Int, at bootstrapServers: String,
                                                    codec: EventCodec = codec) async throws -> [(event: Event, message: KafkaMessage)] {
        let seen = Mutex<[KafkaMessage]>([])
        let consumer = try KafkaConsumer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": bootstrapServers]),
                                                              groupID: "reader-\(UUID().uuidString)", topics: [codec.topic(Event.type)]))
        let task = Task { try await consumer.run { message in seen.withLock { $0.append(message) } } }
        let deadline = ContinuousClock.now + .seconds(120)
        while seen.withLock({ $0.count }) < count, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        consumer.triggerGracefulShutdown()
        try await task.value
        return seen.withLock { $0 }.compactMap { message in
            switch codec.decode(message, as: type) {
            case .success(let event): return (event, message)
            case .failure(let invalid):
                Issue.record("a \(Event.type) on its topic does not decode: \(invalid)")
                return nil
            }
        }
    }
}

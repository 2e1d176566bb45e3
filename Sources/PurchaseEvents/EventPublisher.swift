import Foundation
import JSON
import JSONSchema
import Kafka

/// Publishes pipeline events for producers (app backends, `iap-ingest`, `iapctl submit`): each event is
/// encoded with its CloudEvents headers and deterministic `ce_id`, validated against the shared schema,
/// and `publish` returns only after the broker acknowledged it. An event that would be invalid is
/// refused before anything is sent, so a producer never makes the pipeline dead-letter its messages.
public final class EventPublisher: Sendable {
    /// An event the schema refuses; nothing was published.
    public struct InvalidEvent: Error, Sendable, CustomStringConvertible {
        public let violations: [String]
        public var description: String { "the event does not match its schema: " + violations.joined(separator: "; ") }
    }

    public let codec: EventCodec
    private let producer: KafkaProducer

    /// A publisher with a producer of its own (idempotent, acks=all).
    public convenience init(codec: EventCodec, kafka: KafkaConfiguration) throws {
        self.init(codec: codec, producer: try KafkaProducer(configuration: .init(kafka: kafka)))
    }

    public init(codec: EventCodec, producer: KafkaProducer) {
        self.codec = codec
        self.producer = producer
    }

    /// The message `publish` would send, after checking it against the event's schema.
    public func message<Event: PipelineEvent>(for event: Event, time: Date = Date()) throws -> KafkaProducerMessage {
        let message = try codec.message(event, time: time)
        let body = JSONValue.parse(Array(message.value ?? Data())) ?? .null
        let violations = codec.schemas.validate(body, against: Event.type.schemaID)
        guard violations.isEmpty else { throw InvalidEvent(violations: violations.map(\.description)) }
        return message
    }

    /// Validates, sends, and returns when the broker acknowledged (or throws `InvalidEvent` / `KafkaError`). Neither the
    /// event nor its message is held while the acknowledgement is awaited (librdkafka holds a copy of the message).
    @discardableResult
    public func publish<Event: PipelineEvent>(_ event: consuming Event, time: Date = Date()) async throws -> KafkaDeliveryReport {
        let message = try self.message(for: event, time: time)
        _ = consume event
        return try await producer.send(consume message)
    }

    /// Flushes what is in flight and stops the producer.
    public func shutdown() async { await producer.shutdown() }
}

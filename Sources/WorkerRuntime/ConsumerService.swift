import Kafka

/// A Kafka consumer and its message handler as one `Service`, so that a `ServiceGroup`
/// shuts it down gracefully on SIGTERM/SIGINT.
public struct ConsumerService: Service {
    public let consumer: KafkaConsumer
    private let handler: KafkaConsumer.Handler

    public init(consumer: KafkaConsumer, handler: @escaping KafkaConsumer.Handler) {
        self.consumer = consumer
        self.handler = handler
    }

    public func run() async throws { try await consumer.run(handler) }
    public func triggerGracefulShutdown() { consumer.triggerGracefulShutdown() }
}

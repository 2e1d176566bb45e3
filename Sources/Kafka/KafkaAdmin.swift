/// Cluster administration: metadata, topic creation, and group descriptions.
public final class KafkaAdmin: Sendable {
    private let client: RDKafkaClient

    public init(kafka: KafkaConfiguration) throws {
        try KafkaLibrary.requireSupportedVersion()
        client = try RDKafkaClient.make(kind: .producer, configuration: kafka)
    }

    /// Asks the cluster for its metadata, which proves it is reachable.
    /// - Throws: `KafkaError` with code `.connection` when no broker answered within `timeout`.
    public func metadata(timeout: Duration = .seconds(10)) throws -> (brokers: Int, topics: [String: Int]) {
        do {
            return try client.metadata(timeoutMs: Int32(timeout.milliseconds))
        } catch let error as KafkaError {
            let servers = client.bootstrapServers
            throw KafkaError(
                code: .connection,
                message: "no Kafka broker answered within \(timeout) at \(servers ?? "the configured bootstrap.servers") (\(error.message))",
                rdKafkaCode: error.rdKafkaCode, rdKafkaName: error.rdKafkaName, isRetriable: true)
        }
    }

    /// The number of members of consumer group `group`, as its coordinator describes it. On a handle of its own (not a
    /// consumer's): librdkafka 2.8 hangs the handle's main thread when the broker lacks the API (its mock cluster does).
    public func groupMemberCount(_ group: String, timeout: Duration = .seconds(5)) throws -> Int {
        try client.groupMemberCount(group, timeoutMs: Int32(timeout.milliseconds))
    }

    /// Creates the topics that do not exist yet, with `partitions` partitions each.
    public func createTopics(_ names: [String], partitions: Int32, replicationFactor: Int32 = 1,
                             timeout: Duration = .seconds(10)) throws {
        try client.createTopics(names.map { ($0, partitions, replicationFactor) }, timeoutMs: Int32(timeout.milliseconds))
    }
}

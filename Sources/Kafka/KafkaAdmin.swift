import Synchronization

/// Cluster administration: metadata, topic creation, and group descriptions.
public final class KafkaAdmin: Sendable {
    private let kafka: KafkaConfiguration
    /// The handle calls go through; dropped after a group description went unanswered (see `describeGroup`), and
    /// made again by the next call.
    private let current: Mutex<RDKafkaClient?>

    private var client: RDKafkaClient {
        get throws {
            try current.withLock { current in
                if let client = current { return client }
                let client = try RDKafkaClient.make(kind: .producer, configuration: kafka)
                current = client
                return client
            }
        }
    }

    public init(kafka: KafkaConfiguration) throws {
        try KafkaLibrary.requireSupportedVersion()
        self.kafka = kafka
        current = Mutex(try RDKafkaClient.make(kind: .producer, configuration: kafka))
    }

    /// Asks the cluster for its metadata, which proves it is reachable.
    /// - Throws: `KafkaError` with code `.connection` when no broker answered within `timeout`.
    public func metadata(timeout: Duration = .seconds(10)) throws -> (brokers: Int, topics: [String: Int]) {
        let client = try self.client
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

    /// Consumer group `group` as its coordinator describes it: state, members and what each was assigned. On a handle of
    /// its own (not a consumer's): unfixed, librdkafka 2.8 could hang or abort the handle when the request could not be
    /// sent (a broker without the API, as its mock cluster, or a connection gone); see `deploy/local/patches/librdkafka`.
    ///
    /// A description that got no answer within `timeout` leaves this admin on a new handle: the old one, destroyed
    /// when its last call returns, takes the unanswered request with it before librdkafka could time it out and
    /// abort the process when the coordinator comes back (see `RDKafkaClient.describeGroup`).
    /// - Throws: `KafkaError` with code `.timeout` when unanswered, `.admin` when the coordinator refused.
    public func describeGroup(_ group: String, timeout: Duration = .seconds(5)) throws -> KafkaGroupDescription {
        let client = try self.client
        do {
            return try client.describeGroup(group, timeoutMs: Int32(timeout.milliseconds))
        } catch let error as KafkaError where error.code == .timeout {
            client.abandon()
            current.withLock { if $0 === client { $0 = nil } }
            throw error
        }
    }

    /// Creates the topics that do not exist yet, with `partitions` partitions each. (Tansu can take tens of seconds to
    /// answer many creations at once: hence the default of 30 s.)
    public func createTopics(_ names: [String], partitions: Int32, replicationFactor: Int32 = 1,
                             timeout: Duration = .seconds(30)) throws {
        try client.createTopics(names.map { ($0, partitions, replicationFactor) }, timeoutMs: Int32(timeout.milliseconds))
    }
}

/// The same calls from a task. Each blocks for a broker round trip (up to its timeout), so it runs on a thread of its
/// own (`onOwnThread`): on a task it would hold one of the few threads of Swift's pool (two on two cores) and stall
/// every other task of the process meanwhile. In an async context these are the ones chosen.
extension KafkaAdmin {
    public func metadata(timeout: Duration = .seconds(10)) async throws -> (brokers: Int, topics: [String: Int]) {
        try await onOwnThread { try self.metadata(timeout: timeout) }
    }

    public func describeGroup(_ group: String, timeout: Duration = .seconds(5)) async throws -> KafkaGroupDescription {
        try await onOwnThread { try self.describeGroup(group, timeout: timeout) }
    }

    public func createTopics(_ names: [String], partitions: Int32, replicationFactor: Int32 = 1, timeout: Duration = .seconds(30)) async throws {
        try await onOwnThread { try self.createTopics(names, partitions: partitions, replicationFactor: replicationFactor, timeout: timeout) }
    }
}

/// A consumer group as its coordinator describes it.
public struct KafkaGroupDescription: Sendable, Equatable {
    public struct Member: Sendable, Equatable {
        public var memberID: String
        public var clientID: String
        /// The partitions the coordinator holds as this member's (empty while a rebalance is under way).
        public var assignment: Set<TopicPartition>

        public init(memberID: String, clientID: String, assignment: Set<TopicPartition>) {
            self.memberID = memberID
            self.clientID = clientID
            self.assignment = assignment
        }
    }

    /// The coordinator's name for the group's state: `Stable`, `PreparingRebalance`, `CompletingRebalance`, `Empty`,
    /// `Dead` or `Unknown`.
    public var state: String
    public var members: [Member]

    public init(state: String, members: [Member]) {
        self.state = state
        self.members = members
    }
}

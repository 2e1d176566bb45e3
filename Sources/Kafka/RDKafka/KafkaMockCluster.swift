import CRdKafka

/// librdkafka's in-process mock cluster: real Kafka protocol over loopback, with fault injection.
/// For tests only; it is not a broker to run a pipeline on.
///
/// `@unchecked Sendable`: librdkafka's mock API locks the cluster internally; the handles are
/// immutable after `init` and destroyed only in `deinit`.
public final class KafkaMockCluster: @unchecked Sendable {
    /// Kafka protocol API keys (from the Kafka protocol guide) to inject errors into.
    public enum APIKey: Int16, Sendable {
        case produce = 0, fetch = 1, listOffsets = 2, metadata = 3, offsetCommit = 8, offsetFetch = 9,
             findCoordinator = 10, joinGroup = 11, heartbeat = 12, leaveGroup = 13, syncGroup = 14,
             initProducerId = 22
    }

    /// Kafka protocol error codes to inject.
    public enum ProtocolError: Int32, Sendable {
        case notLeaderForPartition = 6, requestTimedOut = 7, networkException = 13,
             coordinatorLoadInProgress = 14, coordinatorNotAvailable = 15, notCoordinator = 16,
             notEnoughReplicas = 19, leaderNotAvailable = 5
    }

    private let owner: RDKafkaClient
    private let cluster: OpaquePointer

    /// The `bootstrap.servers` value that reaches this cluster.
    public let bootstrapServers: String
    public let brokerCount: Int32

    /// Starts a cluster of `brokers` brokers (ids 1…`brokers`).
    public init(brokers: Int32 = 3) throws {
        // The mock cluster lives on an rd_kafka_t of its own.
        owner = try RDKafkaClient.make(kind: .producer, configuration: KafkaConfiguration(["log_level": "3"]))
        guard let cluster = rd_kafka_mock_cluster_new(owner.handle, brokers) else {
            throw KafkaError(code: .clientCreation, message: "rd_kafka_mock_cluster_new failed")
        }
        self.cluster = cluster
        self.brokerCount = brokers
        bootstrapServers = String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
    }

    deinit { rd_kafka_mock_cluster_destroy(cluster) }

    public func createTopic(_ name: String, partitions: Int32, replicationFactor: Int32 = 1) throws {
        try check(rd_kafka_mock_topic_create(cluster, name, partitions, replicationFactor), "create topic \(name)")
    }

    /// Takes a broker down: its connections are closed, and each new one is closed as soon as it is made (with
    /// `deploy/local/patches/librdkafka/0002`, the listener stays open, so that setting it up again binds nothing).
    public func setBrokerDown(_ broker: Int32) throws {
        try check(rd_kafka_mock_broker_set_down(cluster, broker), "broker \(broker) down")
    }

    public func setBrokerUp(_ broker: Int32) throws {
        try check(rd_kafka_mock_broker_set_up(cluster, broker), "broker \(broker) up")
    }

    /// Moves a partition's leadership to `broker`.
    public func setPartitionLeader(topic: String, partition: Int32, broker: Int32) throws {
        try check(rd_kafka_mock_partition_set_leader(cluster, topic, partition, broker), "leader of \(topic)[\(partition)]")
    }

    /// Makes `broker` the group coordinator of `group`.
    public func setGroupCoordinator(group: String, broker: Int32) throws {
        try check(rd_kafka_mock_coordinator_set(cluster, "group", group, broker), "coordinator of \(group)")
    }

    /// The next requests of `api` answer with `errors`, one each, in order.
    public func pushRequestErrors(_ api: APIKey, _ errors: [ProtocolError]) {
        let codes = errors.map { rd_kafka_resp_err_t($0.rawValue) }
        rd_kafka_mock_push_request_errors_array(cluster, api.rawValue, codes.count, codes)
    }

    /// Drops the errors pushed for `api` that no request has answered with yet.
    public func clearRequestErrors(_ api: APIKey) {
        rd_kafka_mock_clear_request_errors(cluster, api.rawValue)
    }

    private func check(_ err: rd_kafka_resp_err_t, _ what: String) throws {
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.rdKafka(.admin, err, context: "mock cluster: \(what)") }
    }
}

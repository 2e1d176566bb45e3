/// An error from the Kafka layer.
///
/// `code` says which operation failed; where librdkafka reported the failure, its numeric code
/// and symbolic name are kept (`rdKafkaCode`, `rdKafkaName`, e.g. `-195` / `_TRANSPORT`).
/// `isRetriable` and `isFatal` come from librdkafka's own classification, never from
/// matching message text.
public struct KafkaError: Error, Sendable, CustomStringConvertible {
    /// What kind of operation failed.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: String, Sendable {
            case configuration, clientCreation, connection, produce, delivery, consume, commit,
                 subscription, rebalance, admin, timeout, shutdown, unsupportedVersion, handler
        }
        fileprivate let base: Base

        /// A configuration property was rejected.
        public static let configuration = Code(base: .configuration)
        /// librdkafka could not create the client.
        public static let clientCreation = Code(base: .clientCreation)
        /// The brokers could not be reached.
        public static let connection = Code(base: .connection)
        /// A message could not be enqueued for sending.
        public static let produce = Code(base: .produce)
        /// The broker did not acknowledge a message.
        public static let delivery = Code(base: .delivery)
        /// Consuming failed.
        public static let consume = Code(base: .consume)
        /// Committing offsets failed.
        public static let commit = Code(base: .commit)
        /// Subscribing to topics failed.
        public static let subscription = Code(base: .subscription)
        /// Assigning or revoking partitions failed.
        public static let rebalance = Code(base: .rebalance)
        /// An admin request (topic creation, metadata) failed.
        public static let admin = Code(base: .admin)
        /// An operation did not complete in time.
        public static let timeout = Code(base: .timeout)
        /// The client is shutting down or shut down.
        public static let shutdown = Code(base: .shutdown)
        /// The librdkafka loaded at run time is too old.
        public static let unsupportedVersion = Code(base: .unsupportedVersion)
        /// A message handler failed.
        public static let handler = Code(base: .handler)

        public var description: String { base.rawValue }
    }

    /// Which operation failed.
    public let code: Code
    /// librdkafka's `rd_kafka_resp_err_t`, when librdkafka reported the failure.
    public let rdKafkaCode: Int32?
    /// librdkafka's symbolic name for `rdKafkaCode`, e.g. `_TRANSPORT`, `NOT_COORDINATOR`.
    public let rdKafkaName: String?
    /// A human-readable explanation.
    public let message: String
    /// Trying the same operation again may succeed.
    public let isRetriable: Bool
    /// The client cannot be used any more (e.g. an idempotent producer lost its guarantees).
    public let isFatal: Bool

    public init(
        code: Code, message: String, rdKafkaCode: Int32? = nil, rdKafkaName: String? = nil,
        isRetriable: Bool = false, isFatal: Bool = false
    ) {
        self.code = code
        self.message = message
        self.rdKafkaCode = rdKafkaCode
        self.rdKafkaName = rdKafkaName
        self.isRetriable = isRetriable
        self.isFatal = isFatal
    }

    public var description: String {
        var text = "Kafka \(code) error: \(message)"
        if let rdKafkaName, let rdKafkaCode { text += " [\(rdKafkaName) (\(rdKafkaCode))]" }
        if isFatal { text += " (fatal)" } else if isRetriable { text += " (retriable)" }
        return text
    }
}

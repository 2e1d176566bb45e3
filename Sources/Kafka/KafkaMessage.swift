import Foundation

/// A topic and one of its partitions.
public struct TopicPartition: Hashable, Sendable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public var description: String { "\(topic)[\(partition)]" }
}

/// A Kafka record header. A header may have no value (`nil`), which is not the same as empty.
public struct KafkaHeader: Hashable, Sendable {
    public var key: String
    public var value: Data?

    public init(key: String, value: Data?) {
        self.key = key
        self.value = value
    }

    /// A header whose value is the UTF-8 encoding of `value`.
    public init(key: String, string value: String) {
        // Copied from the string's contiguous UTF-8 at once: `Data(value.utf8)` went byte by byte, a fifth of the
        // cost of making a message's headers.
        var value = value
        self.init(key: key, value: value.withUTF8 { Data($0) })
    }

    /// The value decoded as UTF-8, if it is valid UTF-8.
    public var stringValue: String? {
        // ASCII (every CloudEvents attribute the pipeline writes) needs no check beyond its bytes; the rest is validated.
        value?.withUnsafeBytes { raw in
            let bytes = raw.bindMemory(to: UInt8.self)
            return bytes.allSatisfy { $0 < 0x80 } ? String(decoding: bytes, as: UTF8.self) : String(validating: bytes, as: UTF8.self)
        }
    }
}

/// A record consumed from Kafka.
///
/// Its fields live in one immutable box: a message is copied at every step of its way (the partition's buffer, a batch,
/// the in-flight list, results), and copying five reference-counted fields apart (two of them `Data`, copied through
/// their outlined witnesses) costs 2–4 % of a stage's perf samples. Boxed, a copy is one retain; setting a field makes a new box.
public struct KafkaMessage: Sendable {
    private struct Fields: Sendable {
        var topic: String
        var partition: Int32
        var offset: Int64
        var key: Data?
        var value: Data?
        var headers: [KafkaHeader]
        var timestamp: Date?
    }

    private final class Storage: Sendable {
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var storage: Storage

    private mutating func change(_ body: (inout Fields) -> Void) {
        var fields = storage.fields
        body(&fields)
        storage = Storage(fields)
    }

    public var topic: String {
        get { storage.fields.topic }
        set { change { $0.topic = newValue } }
    }
    public var partition: Int32 {
        get { storage.fields.partition }
        set { change { $0.partition = newValue } }
    }
    public var offset: Int64 {
        get { storage.fields.offset }
        set { change { $0.offset = newValue } }
    }
    /// The key, or `nil` when the record has none.
    public var key: Data? {
        get { storage.fields.key }
        set { change { $0.key = newValue } }
    }
    /// The value, or `nil` for a tombstone (a record with a null value).
    public var value: Data? {
        get { storage.fields.value }
        set { change { $0.value = newValue } }
    }
    public var headers: [KafkaHeader] {
        get { storage.fields.headers }
        set { change { $0.headers = newValue } }
    }
    /// The record timestamp, when the broker or producer set one.
    public var timestamp: Date? {
        get { storage.fields.timestamp }
        set { change { $0.timestamp = newValue } }
    }

    public init(
        topic: String, partition: Int32, offset: Int64, key: Data?, value: Data?,
        headers: [KafkaHeader] = [], timestamp: Date? = nil
    ) {
        storage = Storage(Fields(topic: topic, partition: partition, offset: offset, key: key, value: value, headers: headers, timestamp: timestamp))
    }

    public var topicPartition: TopicPartition { TopicPartition(topic: topic, partition: partition) }
    /// The value of the first header named `key`, as UTF-8.
    public func header(_ key: String) -> String? { storage.fields.headers.first { $0.key == key }?.stringValue }
}

/// A record to send to Kafka.
public struct KafkaProducerMessage: Sendable {
    public var topic: String
    /// A fixed partition, or `nil` to let the partitioner choose from the key.
    public var partition: Int32?
    public var key: Data?
    /// The value, or `nil` to send a tombstone.
    public var value: Data?
    public var headers: [KafkaHeader]

    public init(topic: String, partition: Int32? = nil, key: Data?, value: Data?, headers: [KafkaHeader] = []) {
        self.topic = topic
        self.partition = partition
        self.key = key
        self.value = value
        self.headers = headers
    }

    /// A record with a UTF-8 string key.
    public init(topic: String, key: String, value: Data?, headers: [KafkaHeader] = []) {
        self.init(topic: topic, key: Data(key.utf8), value: value, headers: headers)
    }
}

/// The broker's acknowledgement of one record.
public struct KafkaDeliveryReport: Sendable, Hashable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
}

import CRdKafka

/// Owns an `rd_kafka_topic_partition_list_t`, destroyed in `deinit`.
///
/// The pointer is only lent out through `withPointer`, which keeps the list alive for the whole
/// C call (ARC may otherwise free it right after the last Swift use, before the call returns).
final class RDKafkaTopicPartitionList {
    struct Entry {
        let partition: TopicPartition
        let offset: Int64
        let err: rd_kafka_resp_err_t
    }

    private let pointer: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>

    init(capacity: Int = 1) {
        pointer = rd_kafka_topic_partition_list_new(Int32(max(capacity, 1)))
    }

    convenience init(_ partitions: [TopicPartition], offset: Int64? = nil) {
        self.init(capacity: partitions.count)
        for partition in partitions { add(partition, offset: offset) }
    }

    deinit { rd_kafka_topic_partition_list_destroy(pointer) }

    func add(_ partition: TopicPartition, offset: Int64? = nil) {
        let element = rd_kafka_topic_partition_list_add(pointer, partition.topic, partition.partition)!
        if let offset { element.pointee.offset = offset }
    }

    /// Subscription lists name topics only; librdkafka wants the unassigned partition there.
    func addTopic(_ topic: String) {
        _ = rd_kafka_topic_partition_list_add(pointer, topic, -1)
    }

    /// The partitions of a list librdkafka owns (e.g. in a rebalance callback).
    static func partitions(of list: UnsafePointer<rd_kafka_topic_partition_list_t>?) -> [TopicPartition] {
        guard let list, list.pointee.cnt > 0, let elements = list.pointee.elems else { return [] }
        return (0..<Int(list.pointee.cnt)).map { index in
            TopicPartition(topic: String(cString: elements[index].topic), partition: elements[index].partition)
        }
    }

    func withPointer<T>(_ body: (UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) throws -> T) rethrows -> T {
        try withExtendedLifetime(self) { try body(pointer) }
    }

    /// The elements, with the offsets and errors librdkafka filled in.
    var entries: [Entry] {
        withPointer { list in
            guard list.pointee.cnt > 0, let elements = list.pointee.elems else { return [] }
            return (0..<Int(list.pointee.cnt)).map { index in
                Entry(partition: TopicPartition(topic: String(cString: elements[index].topic), partition: elements[index].partition),
                      offset: elements[index].offset, err: elements[index].err)
            }
        }
    }
}

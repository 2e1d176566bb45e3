import CRdKafka
import Foundation

extension RDKafkaClient {
    enum PollResult {
        case message(KafkaMessage)
        case partitionEnd(TopicPartition)
        case error(KafkaError)
    }

    func subscribe(topics: [String]) throws {
        let list = RDKafkaTopicPartitionList(capacity: topics.count)
        topics.forEach(list.addTopic)
        let err = list.withPointer { rd_kafka_subscribe(handle, $0) }
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError.rdKafka(.subscription, err, context: "subscribe to \(topics.joined(separator: ","))")
        }
    }

    /// Waits up to `timeoutMs` for a message; serves rebalance and error callbacks meanwhile.
    func consumerPoll(timeoutMs: Int32) -> PollResult? {
        guard let pointer = rd_kafka_consumer_poll(handle, timeoutMs) else { return nil }
        defer { rd_kafka_message_destroy(pointer) }
        let raw = pointer.pointee
        let topic = raw.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
        switch raw.err {
        case RD_KAFKA_RESP_ERR_NO_ERROR:
            return .message(Self.message(from: pointer, topic: topic))
        case RD_KAFKA_RESP_ERR__PARTITION_EOF:
            return .partitionEnd(TopicPartition(topic: topic, partition: raw.partition))
        default:
            let detail = raw.payload.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: raw.len), as: UTF8.self) }
            return .error(.rdKafka(.consume, raw.err, context: detail ?? "consume from \(topic)"))
        }
    }

    /// Copies a consumed message out of librdkafka's memory. A null payload (tombstone) stays `nil`.
    private static func message(from pointer: UnsafeMutablePointer<rd_kafka_message_t>, topic: String) -> KafkaMessage {
        let raw = pointer.pointee
        let key = raw.key.map { Data(bytes: $0, count: raw.key_len) }
        let value = raw.payload.map { Data(bytes: $0, count: raw.len) }
        var headers: [KafkaHeader] = []
        var list: OpaquePointer?
        if rd_kafka_message_headers(pointer, &list) == RD_KAFKA_RESP_ERR_NO_ERROR, let list {
            var index = 0
            var name: UnsafePointer<CChar>?
            var bytes: UnsafeRawPointer?
            var size = 0
            while rd_kafka_header_get_all(list, index, &name, &bytes, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
                headers.append(KafkaHeader(key: name.map { String(cString: $0) } ?? "", value: bytes.map { Data(bytes: $0, count: size) }))
                index += 1
            }
        }
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let millis = rd_kafka_message_timestamp(pointer, &timestampType)
        let timestamp = timestampType == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? nil : Date(timeIntervalSince1970: Double(millis) / 1000)
        return KafkaMessage(topic: topic, partition: raw.partition, offset: raw.offset, key: key, value: value,
                            headers: headers, timestamp: timestamp)
    }

    /// Marks `offset` as the next one to commit for `partition` (the offset after the handled message).
    func storeOffset(_ partition: TopicPartition, offset: Int64) throws {
        let list = RDKafkaTopicPartitionList([partition], offset: offset)
        let err = list.withPointer { rd_kafka_offsets_store(handle, $0) }
        if err != RD_KAFKA_RESP_ERR_NO_ERROR {
            throw KafkaError.rdKafka(.commit, err, context: "store offset \(offset) for \(partition)")
        }
        if let failed = list.entries.first(where: { $0.err != RD_KAFKA_RESP_ERR_NO_ERROR }) {
            throw KafkaError.rdKafka(.commit, failed.err, context: "store offset \(offset) for \(failed.partition)")
        }
    }

    /// Commits the stored offsets and waits for the broker's answer. Nothing stored is not an error.
    func commitStoredOffsets() throws {
        let err = rd_kafka_commit(handle, nil, 0)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR || err == RD_KAFKA_RESP_ERR__NO_OFFSET else {
            throw KafkaError.rdKafka(.commit, err, context: "commit")
        }
    }

    /// Committed offsets of `partitions` (`nil` where none is committed).
    func committedOffsets(_ partitions: [TopicPartition], timeoutMs: Int32) throws -> [TopicPartition: Int64] {
        let list = RDKafkaTopicPartitionList(partitions)
        let err = list.withPointer { rd_kafka_committed(handle, $0, timeoutMs) }
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.rdKafka(.commit, err, context: "committed offsets") }
        var result: [TopicPartition: Int64] = [:]
        for entry in list.entries where entry.offset >= 0 { result[entry.partition] = entry.offset }
        return result
    }

    /// The low and high watermark of a partition, asked of its leader.
    func watermarks(_ partition: TopicPartition, timeoutMs: Int32) throws -> (low: Int64, high: Int64) {
        var low: Int64 = 0
        var high: Int64 = 0
        let err = rd_kafka_query_watermark_offsets(handle, partition.topic, partition.partition, &low, &high, timeoutMs)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.rdKafka(.consume, err, context: "watermarks of \(partition)") }
        return (low, high)
    }

    func pause(_ partitions: [TopicPartition]) throws {
        let err = RDKafkaTopicPartitionList(partitions).withPointer { rd_kafka_pause_partitions(handle, $0) }
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.rdKafka(.consume, err, context: "pause") }
    }

    func resume(_ partitions: [TopicPartition]) throws {
        let err = RDKafkaTopicPartitionList(partitions).withPointer { rd_kafka_resume_partitions(handle, $0) }
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.rdKafka(.consume, err, context: "resume") }
    }

    /// The member id the group coordinator assigned (nil before joining).
    var memberID: String? {
        guard let pointer = rd_kafka_memberid(handle) else { return nil }
        defer { rd_kafka_mem_free(handle, pointer) }
        let id = String(cString: pointer)
        return id.isEmpty ? nil : id
    }

    /// Leaves the group (running the revoke callback first) and commits when auto-commit is on.
    func closeConsumer() throws {
        defer { markClosed() }
        let err = rd_kafka_consumer_close(handle)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError.rdKafka(.shutdown, err, context: "consumer close") }
    }
}

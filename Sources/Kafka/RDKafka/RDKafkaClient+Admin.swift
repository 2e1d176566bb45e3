import CRdKafka

extension RDKafkaClient {
    /// Cluster metadata: broker count and, per topic, its partition count.
    func metadata(timeoutMs: Int32) throws -> (brokers: Int, topics: [String: Int]) {
        var pointer: UnsafePointer<rd_kafka_metadata>?
        let err = rd_kafka_metadata(handle, 1, nil, &pointer, timeoutMs)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata = pointer else {
            throw KafkaError.rdKafka(.connection, err, context: "metadata request failed")
        }
        defer { rd_kafka_metadata_destroy(metadata) }
        var topics: [String: Int] = [:]
        for index in 0..<Int(metadata.pointee.topic_cnt) {
            let topic = metadata.pointee.topics[index]
            if topic.err == RD_KAFKA_RESP_ERR_NO_ERROR {
                topics[String(cString: topic.topic)] = Int(topic.partition_cnt)
            }
        }
        return (Int(metadata.pointee.broker_cnt), topics)
    }

    /// The members of consumer group `group`, as its coordinator describes it (DescribeConsumerGroups).
    ///
    /// The request's own timeout is set a minute past `timeoutMs`, and this call waits `timeoutMs`: a handle whose call
    /// went unanswered must be destroyed (`KafkaAdmin` does) before librdkafka times the request out. In librdkafka (2.8
    /// and later) a coordinator request that times out while it waits for its coordinator is freed, and when that
    /// coordinator's connection comes up later the freed request is sent and its answer aborts the process
    /// (`rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0'`): a worker whose broker stopped answering
    /// for a while died of it when the broker came back. A handle destroyed first fails the waiting request instead.
    /// - Throws: `KafkaError` with code `.timeout` when no answer came within `timeoutMs`.
    func describeGroup(_ group: String, timeoutMs: Int32) throws -> KafkaGroupDescription {
        var errorBuffer = [CChar](repeating: 0, count: 512)
        let queue = rd_kafka_queue_new(handle)
        defer { rd_kafka_queue_destroy(queue) }
        let options = rd_kafka_AdminOptions_new(handle, RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS)
        defer { rd_kafka_AdminOptions_destroy(options) }
        let requestTimeoutMs = min(Int64(timeoutMs) + 60_000, 3_600_000) // librdkafka's upper bound
        _ = rd_kafka_AdminOptions_set_request_timeout(options, Int32(requestTimeoutMs), &errorBuffer, errorBuffer.count)
        group.withCString { name in
            var groups: [UnsafePointer<CChar>?] = [name]
            rd_kafka_DescribeConsumerGroups(handle, &groups, 1, options, queue)
        }
        guard let event = rd_kafka_queue_poll(queue, timeoutMs) else {
            throw KafkaError(code: .timeout, message: "DescribeConsumerGroups got no answer within \(timeoutMs) ms", isRetriable: true)
        }
        defer { rd_kafka_event_destroy(event) }
        let eventErr = rd_kafka_event_error(event)
        guard eventErr == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError.rdKafka(.admin, eventErr, context: "DescribeConsumerGroups \(group)") }
        var count = 0
        guard let results = rd_kafka_DescribeConsumerGroups_result_groups(rd_kafka_event_DescribeConsumerGroups_result(event), &count), count == 1,
              let description = results[0] else {
            throw KafkaError(code: .admin, message: "DescribeConsumerGroups \(group): no description")
        }
        if let error = rd_kafka_ConsumerGroupDescription_error(description) {
            throw KafkaError(code: .admin, message: "DescribeConsumerGroups \(group): \(String(cString: rd_kafka_error_string(error)))")
        }
        let members = (0..<rd_kafka_ConsumerGroupDescription_member_count(description)).compactMap { index -> KafkaGroupDescription.Member? in
            guard let member = rd_kafka_ConsumerGroupDescription_member(description, index) else { return nil }
            let partitions = rd_kafka_MemberDescription_assignment(member).flatMap { rd_kafka_MemberAssignment_partitions($0) }
            return KafkaGroupDescription.Member(
                memberID: rd_kafka_MemberDescription_consumer_id(member).map { String(cString: $0) } ?? "",
                clientID: rd_kafka_MemberDescription_client_id(member).map { String(cString: $0) } ?? "",
                assignment: Set(RDKafkaTopicPartitionList.partitions(of: partitions)))
        }
        let state = String(cString: rd_kafka_consumer_group_state_name(rd_kafka_ConsumerGroupDescription_state(description)))
        return KafkaGroupDescription(state: state, members: members)
    }

    /// Creates topics; a topic that already exists is not an error.
    func createTopics(_ topics: [(name: String, partitions: Int32, replicationFactor: Int32)], timeoutMs: Int32) throws {
        guard !topics.isEmpty else { return }
        var errorBuffer = [CChar](repeating: 0, count: 512)
        var newTopics: [OpaquePointer?] = []
        defer { newTopics.forEach { rd_kafka_NewTopic_destroy($0) } }
        for topic in topics {
            guard let newTopic = rd_kafka_NewTopic_new(topic.name, topic.partitions, topic.replicationFactor, &errorBuffer, errorBuffer.count) else {
                throw KafkaError(code: .admin, message: "topic \(topic.name): \(String(errorBuffer: errorBuffer))")
            }
            newTopics.append(newTopic)
        }
        let queue = rd_kafka_queue_new(handle)
        defer { rd_kafka_queue_destroy(queue) }
        let options = rd_kafka_AdminOptions_new(handle, RD_KAFKA_ADMIN_OP_CREATETOPICS)
        defer { rd_kafka_AdminOptions_destroy(options) }
        _ = rd_kafka_AdminOptions_set_operation_timeout(options, timeoutMs, &errorBuffer, errorBuffer.count)
        _ = rd_kafka_AdminOptions_set_request_timeout(options, timeoutMs, &errorBuffer, errorBuffer.count)
        rd_kafka_CreateTopics(handle, &newTopics, newTopics.count, options, queue)

        guard let event = rd_kafka_queue_poll(queue, timeoutMs + 1000) else {
            throw KafkaError(code: .timeout, message: "CreateTopics got no answer within \(timeoutMs) ms", isRetriable: true)
        }
        defer { rd_kafka_event_destroy(event) }
        let eventErr = rd_kafka_event_error(event)
        guard eventErr == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError.rdKafka(.admin, eventErr, context: "CreateTopics")
        }
        var count = 0
        guard let results = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(event), &count) else { return }
        for index in 0..<count {
            let err = rd_kafka_topic_result_error(results[index])
            guard err != RD_KAFKA_RESP_ERR_NO_ERROR, err != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS else { continue }
            let name = String(cString: rd_kafka_topic_result_name(results[index]))
            let detail = rd_kafka_topic_result_error_string(results[index]).map { String(cString: $0) } ?? ""
            throw KafkaError.rdKafka(.admin, err, context: "create topic \(name) \(detail)")
        }
    }
}

extension RDKafkaClient {
    /// The `bootstrap.servers` this client was configured with.
    var bootstrapServers: String? {
        guard let conf = rd_kafka_conf(handle) else { return nil }
        var size = 0
        guard rd_kafka_conf_get(conf, "bootstrap.servers", nil, &size) == RD_KAFKA_CONF_OK, size > 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: size)
        guard rd_kafka_conf_get(conf, "bootstrap.servers", &buffer, &size) == RD_KAFKA_CONF_OK else { return nil }
        return String(errorBuffer: buffer)
    }
}

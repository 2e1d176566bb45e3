import CRdKafka

extension KafkaError {
    /// An error from a plain `rd_kafka_resp_err_t`.
    ///
    /// librdkafka only classifies `rd_kafka_error_t` objects as retriable or fatal; for bare
    /// response codes (delivery reports, consumer errors, admin results) the classification comes
    /// from the Kafka protocol's list of retriable errors and librdkafka's transient local ones.
    static func rdKafka(_ code: Code, _ err: rd_kafka_resp_err_t, context: String? = nil) -> KafkaError {
        let name = String(cString: rd_kafka_err2name(err))
        let text = String(cString: rd_kafka_err2str(err))
        return KafkaError(
            code: code,
            message: context.map { "\($0): \(text)" } ?? text,
            rdKafkaCode: err.rawValue,
            rdKafkaName: name,
            isRetriable: retriableCodes.contains(err.rawValue),
            isFatal: err == RD_KAFKA_RESP_ERR__FATAL
        )
    }

    /// An error from an `rd_kafka_error_t`, which it destroys.
    static func rdKafka(_ code: Code, consuming error: OpaquePointer, context: String? = nil) -> KafkaError {
        defer { rd_kafka_error_destroy(error) }
        let err = rd_kafka_error_code(error)
        let text = String(cString: rd_kafka_error_string(error))
        return KafkaError(
            code: code,
            message: context.map { "\($0): \(text)" } ?? text,
            rdKafkaCode: err.rawValue,
            rdKafkaName: String(cString: rd_kafka_error_name(error)),
            isRetriable: rd_kafka_error_is_retriable(error) != 0 || retriableCodes.contains(err.rawValue),
            isFatal: rd_kafka_error_is_fatal(error) != 0
        )
    }

    /// Codes after which the same request may succeed later.
    private static let retriableCodes: Set<Int32> = [
        RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, RD_KAFKA_RESP_ERR__TIMED_OUT,
        RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, RD_KAFKA_RESP_ERR__QUEUE_FULL, RD_KAFKA_RESP_ERR__RESOLVE,
        RD_KAFKA_RESP_ERR__WAIT_COORD, RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE, RD_KAFKA_RESP_ERR__OUTDATED,
        RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION, RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
        RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE, RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
        RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR, RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS,
        RD_KAFKA_RESP_ERR_FETCH_SESSION_ID_NOT_FOUND, RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH,
        RD_KAFKA_RESP_ERR_OFFSET_NOT_AVAILABLE, RD_KAFKA_RESP_ERR_PREFERRED_LEADER_NOT_AVAILABLE,
    ].reduce(into: []) { $0.insert($1.rawValue) }
}

extension String {
    /// The NUL-terminated text librdkafka wrote into an error buffer.
    init(errorBuffer: [CChar]) {
        self.init(decoding: errorBuffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

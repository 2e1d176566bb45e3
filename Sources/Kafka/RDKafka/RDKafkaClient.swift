import CRdKafka
import Foundation
import Synchronization

/// What librdkafka's C callbacks report, buffered until a Swift poll loop drains it.
final class RDKafkaEvents: Sendable {
    struct Delivery: Sendable {
        let id: UInt
        let result: Result<KafkaDeliveryReport, KafkaError>
    }

    /// Assignment changes, called synchronously on the polling thread from the rebalance callback,
    /// because librdkafka requires the (incremental) assign/unassign to happen inside that callback.
    struct RebalanceHandler: Sendable {
        /// Called before revoked partitions are unassigned: finish or abandon their work and commit.
        var willRevoke: @Sendable ([TopicPartition]) -> Void
        /// Called after new partitions are assigned.
        var didAssign: @Sendable ([TopicPartition]) -> Void
    }

    let deliveries = Mutex<[Delivery]>([])
    let errors = Mutex<[KafkaError]>([])
    let rebalanceHandler = Mutex<RebalanceHandler?>(nil)
    /// The latest statistics JSON (emitted every `statistics.interval.ms`; none when that is 0).
    let statistics = Mutex<String?>(nil)

    func drainDeliveries() -> [Delivery] { deliveries.withLock { swap(&$0, []) } }
    func drainErrors() -> [KafkaError] { errors.withLock { swap(&$0, []) } }

    private func swap<T>(_ array: inout [T], _ empty: [T]) -> [T] {
        let drained = array
        array = empty
        return drained
    }
}

/// Owns an `rd_kafka_t` handle; destroys it in `deinit`.
///
/// `@unchecked Sendable`: the handle is only used through librdkafka's thread-safe API
/// (`rd_kafka_t` functions may be called from any thread); the mutable `closed` flag is
/// guarded by a `Mutex`.
final class RDKafkaClient: @unchecked Sendable {
    enum Kind { case producer, consumer }

    let handle: OpaquePointer
    let kind: Kind
    let events: RDKafkaEvents
    private let closed = Mutex(false)
    /// Set on a handle given up with a request outstanding (`abandon()`).
    private let abandoned = Mutex(false)

    private init(handle: OpaquePointer, kind: Kind, events: RDKafkaEvents) {
        self.handle = handle
        self.kind = kind
        self.events = events
    }

    deinit {
        if abandoned.withLock({ $0 }) {
            let handle = AbandonedHandle(pointer: handle)
            let events = self.events // the handle's callbacks' opaque: kept until the handle is gone
            Thread { withExtendedLifetime(events) { rd_kafka_destroy(handle.pointer) } }.start()
            return
        }
        // A consumer that was not closed (a simulated crash) must not commit on the way out.
        let wasClosed = closed.withLock { $0 }
        if kind == .consumer && !wasClosed {
            rd_kafka_destroy_flags(handle, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE)
        } else {
            rd_kafka_destroy(handle)
        }
    }

    /// Marks this handle (an admin client's, never a consumer's) as given up with a request outstanding: when released,
    /// it is destroyed on a thread of its own, since destroying waits for librdkafka's main thread, which an unfixed
    /// librdkafka 2.8 can hang on such a request (see `KafkaAdmin.describeGroup`), and whoever released it last must
    /// not hang with it.
    func abandon() { abandoned.withLock { $0 = true } }

    /// Creates a client. The C configuration is freed here if creation fails
    /// (librdkafka takes ownership only on success).
    static func make(kind: Kind, configuration: KafkaConfiguration, handlesRebalance: Bool = false) throws -> RDKafkaClient {
        guard let conf = rd_kafka_conf_new() else {
            throw KafkaError(code: .clientCreation, message: "rd_kafka_conf_new failed")
        }
        var errorBuffer = [CChar](repeating: 0, count: 512)
        for (name, value) in configuration.properties.sorted(by: { $0.key < $1.key }) {
            if rd_kafka_conf_set(conf, name, value, &errorBuffer, errorBuffer.count) != RD_KAFKA_CONF_OK {
                rd_kafka_conf_destroy(conf)
                throw KafkaError(code: .configuration, message: "\(name): \(String(errorBuffer: errorBuffer))")
            }
        }
        let events = RDKafkaEvents()
        // The events box outlives the handle: the client holds it and destroys the handle first.
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(events).toOpaque())
        rd_kafka_conf_set_error_cb(conf, errorCallback)
        rd_kafka_conf_set_stats_cb(conf, statisticsCallback)
        switch kind {
        case .producer:
            rd_kafka_conf_set_dr_msg_cb(conf, deliveryCallback)
        case .consumer:
            if handlesRebalance { rd_kafka_conf_set_rebalance_cb(conf, rebalanceCallback) }
        }
        let type = kind == .producer ? RD_KAFKA_PRODUCER : RD_KAFKA_CONSUMER
        guard let handle = rd_kafka_new(type, conf, &errorBuffer, errorBuffer.count) else {
            rd_kafka_conf_destroy(conf)
            throw KafkaError(code: .clientCreation, message: String(errorBuffer: errorBuffer))
        }
        if kind == .consumer {
            // Serve errors and rebalances from the consumer queue, i.e. from consumerPoll.
            rd_kafka_poll_set_consumer(handle)
        }
        return RDKafkaClient(handle: handle, kind: kind, events: events)
    }

    /// Serves callbacks (delivery reports, errors); blocks up to `timeoutMs`.
    func poll(timeoutMs: Int32) {
        rd_kafka_poll(handle, timeoutMs)
    }

    /// The fatal error that made this client unusable, if any.
    func fatalError() -> KafkaError? {
        var buffer = [CChar](repeating: 0, count: 512)
        let err = rd_kafka_fatal_error(handle, &buffer, buffer.count)
        guard err != RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
        return KafkaError(code: .clientCreation, message: String(errorBuffer: buffer), rdKafkaCode: err.rawValue,
                          rdKafkaName: String(cString: rd_kafka_err2name(err)), isFatal: true)
    }

    func markClosed() { closed.withLock { $0 = true } }
}

// MARK: - C callbacks: they only push into the events box; Swift poll loops act on it.

private func events(from opaque: UnsafeMutableRawPointer?) -> RDKafkaEvents? {
    opaque.map { Unmanaged<RDKafkaEvents>.fromOpaque($0).takeUnretainedValue() }
}

private func deliveryCallback(
    _ handle: OpaquePointer?, _ message: UnsafePointer<rd_kafka_message_t>?, _ opaque: UnsafeMutableRawPointer?
) {
    guard let message, let events = events(from: opaque) else { return }
    let id = UInt(bitPattern: message.pointee._private)
    let topic = message.pointee.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
    let result: Result<KafkaDeliveryReport, KafkaError>
    if message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR {
        result = .success(KafkaDeliveryReport(topic: topic, partition: message.pointee.partition, offset: message.pointee.offset))
    } else {
        result = .failure(.rdKafka(.delivery, message.pointee.err, context: "delivery to \(topic) failed"))
    }
    events.deliveries.withLock { $0.append(.init(id: id, result: result)) }
}

private func errorCallback(
    _ handle: OpaquePointer?, _ code: Int32, _ reason: UnsafePointer<CChar>?, _ opaque: UnsafeMutableRawPointer?
) {
    guard let events = events(from: opaque) else { return }
    let err = rd_kafka_resp_err_t(code)
    let error = KafkaError.rdKafka(.connection, err, context: reason.map { String(cString: $0) })
    events.errors.withLock { $0.append(error) }
}

private func statisticsCallback(
    _ handle: OpaquePointer?, _ json: UnsafeMutablePointer<CChar>?, _ length: Int, _ opaque: UnsafeMutableRawPointer?
) -> Int32 {
    guard let json, let events = events(from: opaque) else { return 0 }
    let text = String(decoding: UnsafeRawBufferPointer(start: json, count: length), as: UTF8.self)
    events.statistics.withLock { $0 = text }
    return 0 // librdkafka frees the JSON.
}

private func rebalanceCallback(
    _ handle: OpaquePointer?, _ err: rd_kafka_resp_err_t,
    _ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, _ opaque: UnsafeMutableRawPointer?
) {
    guard let handle, let events = events(from: opaque) else { return }
    let handler = events.rebalanceHandler.withLock { $0 }
    let partitions = RDKafkaTopicPartitionList.partitions(of: list)
    let cooperative = String(cString: rd_kafka_rebalance_protocol(handle)) == "COOPERATIVE"
    var failure: OpaquePointer?
    var legacyErr = RD_KAFKA_RESP_ERR_NO_ERROR
    switch err {
    case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
        if cooperative { failure = rd_kafka_incremental_assign(handle, list) } else { legacyErr = rd_kafka_assign(handle, list) }
        handler?.didAssign(partitions)
    case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
        handler?.willRevoke(partitions)
        if cooperative { failure = rd_kafka_incremental_unassign(handle, list) } else { legacyErr = rd_kafka_assign(handle, nil) }
    default:
        // A rebalance error: drop the assignment so that the group can recover.
        handler?.willRevoke(partitions)
        if cooperative { failure = rd_kafka_incremental_unassign(handle, list) } else { legacyErr = rd_kafka_assign(handle, nil) }
        events.errors.withLock { $0.append(.rdKafka(.rebalance, err, context: "rebalance failed")) }
    }
    if let failure {
        let error = KafkaError.rdKafka(.rebalance, consuming: failure, context: "assignment change failed")
        events.errors.withLock { $0.append(error) }
    } else if legacyErr != RD_KAFKA_RESP_ERR_NO_ERROR {
        events.errors.withLock { $0.append(.rdKafka(.rebalance, legacyErr, context: "assignment change failed")) }
    }
}

/// An abandoned handle on its way to the thread that destroys it. `@unchecked Sendable`: nothing else holds the
/// handle any more (its owner is being deinitialised), so that thread is its only user.
private struct AbandonedHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}

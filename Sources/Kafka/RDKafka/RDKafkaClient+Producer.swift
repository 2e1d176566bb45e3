import CRdKafka
import Foundation

extension RDKafkaClient {
    /// Enqueues `message`; its delivery report carries `id`.
    /// - Throws: `KafkaError` with `rdKafkaName == "_QUEUE_FULL"` (retriable) when the local queue is full.
    func produce(_ message: KafkaProducerMessage, id: UInt) throws {
        // Headers are handed to librdkafka, which frees them only when produce succeeds.
        var headers: OpaquePointer?
        if !message.headers.isEmpty {
            headers = rd_kafka_headers_new(message.headers.count)
            for header in message.headers {
                let err: rd_kafka_resp_err_t
                if let value = header.value {
                    err = value.withUnsafeBytes { rd_kafka_header_add(headers, header.key, -1, $0.baseAddress, $0.count) }
                } else {
                    err = rd_kafka_header_add(headers, header.key, -1, nil, 0)
                }
                if err != RD_KAFKA_RESP_ERR_NO_ERROR {
                    rd_kafka_headers_destroy(headers)
                    throw KafkaError.rdKafka(.produce, err, context: "header \(header.key)")
                }
            }
        }
        let key = message.key ?? Data()
        let value = message.value ?? Data()
        let error: OpaquePointer? = message.topic.withCString { topic in
            key.withUnsafeBytes { keyBytes in
                value.withUnsafeBytes { valueBytes in
                    var vus = [rd_kafka_vu_t](repeating: rd_kafka_vu_t(), count: 7)
                    var count = 0
                    func append(_ type: rd_kafka_vtype_t, _ set: (inout rd_kafka_vu_t) -> Void) {
                        vus[count].vtype = type
                        set(&vus[count])
                        count += 1
                    }
                    append(RD_KAFKA_VTYPE_TOPIC) { $0.u.cstr = topic }
                    append(RD_KAFKA_VTYPE_MSGFLAGS) { $0.u.i = RD_KAFKA_MSG_F_COPY }
                    append(RD_KAFKA_VTYPE_OPAQUE) { $0.u.ptr = UnsafeMutableRawPointer(bitPattern: id) }
                    if let partition = message.partition {
                        append(RD_KAFKA_VTYPE_PARTITION) { $0.u.i32 = partition }
                    }
                    if message.key != nil {
                        append(RD_KAFKA_VTYPE_KEY) {
                            $0.u.mem.ptr = UnsafeMutableRawPointer(mutating: keyBytes.baseAddress)
                            $0.u.mem.size = keyBytes.count
                        }
                    }
                    if message.value != nil {
                        append(RD_KAFKA_VTYPE_VALUE) {
                            $0.u.mem.ptr = UnsafeMutableRawPointer(mutating: valueBytes.baseAddress)
                            $0.u.mem.size = valueBytes.count
                        }
                    }
                    if let headers {
                        append(RD_KAFKA_VTYPE_HEADERS) { $0.u.headers = headers }
                    }
                    return rd_kafka_produceva(handle, vus, count)
                }
            }
        }
        if let error {
            if headers != nil { rd_kafka_headers_destroy(headers) }
            throw KafkaError.rdKafka(.produce, consuming: error, context: "produce to \(message.topic)")
        }
    }

    /// Waits until all enqueued messages are delivered or failed; `false` if `timeoutMs` passed first.
    func flush(timeoutMs: Int32) -> Bool {
        rd_kafka_flush(handle, timeoutMs) == RD_KAFKA_RESP_ERR_NO_ERROR
    }

    /// Messages enqueued but not yet delivered or failed.
    var outQueueLength: Int32 { rd_kafka_outq_len(handle) }
}

import Foundation
import Kafka

/// `deadletter`: a message a stage could not process, kept whole (bytes, headers, origin) with the reason.
public struct DeadLetter: PipelineEvent, Hashable {
    public static let type = EventType.deadLetter
    public struct Header: Codable, Sendable, Hashable {
        public var key: String
        /// base64; `null` for a header without a value (written out, not omitted: the schema requires it).
        public var value: String?

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(key, forKey: .key)
            try container.encode(value, forKey: .value)
        }
    }

    public var reason: String
    public var detail: String
    public var stage: String
    public var sourceTopic: String
    public var sourcePartition: Int64
    public var sourceOffset: Int64
    /// base64 of the original key and value.
    public var key: String?
    public var value: String?
    /// The original value's size and SHA-256, so that a truncated one can still be matched to its source.
    public var valueBytes: Int64?
    public var valueSHA256: String?
    /// Only the value's beginning is kept: it was larger than `maxValueBytes` (the record must stay publishable:
    /// a dead letter too large for the broker would stop the stage), or than the operator lets dead letters keep.
    public var valueTruncated: Bool?

    /// How much of an original value a dead letter keeps.
    public static let maxValueBytes = 256 * 1024
    public var headers: [Header]
    public var failedAt: Date

    /// - Parameter keepValueBytes: how much of the original value to keep (at most `maxValueBytes`). Inputs carry
    ///   signed store payloads that anyone holding them can submit; with a small limit a dead letter keeps their
    ///   beginning, size and SHA-256 — enough to find the source message, not to claim the purchase.
    public init(reason: String, detail: String, stage: String, message: KafkaMessage, failedAt: Date, keepValueBytes: Int = maxValueBytes) {
        self.reason = reason
        // Bounded: a detail quoting a huge input must not make the dead letter itself invalid.
        self.detail = String(detail.prefix(4000))
        self.stage = stage
        self.sourceTopic = message.topic
        self.sourcePartition = Int64(message.partition)
        self.sourceOffset = message.offset
        self.key = message.key?.base64EncodedString()
        if let value = message.value {
            let kept = max(0, min(keepValueBytes, Self.maxValueBytes))
            self.value = value.prefix(kept).base64EncodedString()
            self.valueBytes = Int64(value.count)
            self.valueSHA256 = ContentHash.hex(value)
            self.valueTruncated = value.count > kept ? true : nil
        }
        self.headers = message.headers.map { Header(key: $0.key, value: $0.value?.base64EncodedString()) }
        self.failedAt = failedAt
    }

    /// Dead letters keep the original key, so they stay on the user's partition.
    public var messageKey: Data? { key.flatMap { Data(base64Encoded: $0) } }

    public var eventID: String { "deadletter:\(sourceTopic):\(sourcePartition):\(sourceOffset)" }

    /// The same letter without the original bytes: what is published when even a truncated record cannot be.
    public var stripped: DeadLetter {
        var letter = self
        letter.key = nil
        letter.value = nil
        letter.headers = []
        letter.valueTruncated = (valueBytes ?? 0) > 0 ? true : nil
        return letter
    }

    /// The original message, to re-publish after a fix (`nil` when the value was truncated).
    public func originalMessage() -> KafkaProducerMessage? {
        guard valueTruncated != true else { return nil }
        return KafkaProducerMessage(topic: sourceTopic, key: messageKey, value: value.flatMap { Data(base64Encoded: $0) },
                             headers: headers.map { KafkaHeader(key: $0.key, value: $0.value.flatMap { Data(base64Encoded: $0) }) })
    }
}

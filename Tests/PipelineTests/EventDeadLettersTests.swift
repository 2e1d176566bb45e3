import Foundation
import JSONSchema
import Kafka
import PurchaseEvents
import Stages
import Testing
import TestSupport
import WorkerRuntime

/// What the runners publish as dead letters is the pipeline's `deadletter` event, built as the codec builds it.
@Suite struct EventDeadLettersTests {
    static let codec = EventCodec(schemas: try! JSONSchemaRegistry(directory: TestServices.packageRoot.appendingPathComponent("schemas")),
                                  source: "/iap-pipeline/verifier", topicPrefix: "staging.")
    static let failedAt = Date(timeIntervalSince1970: 1_764_410_000.25)
    static let message = KafkaMessage(topic: "staging.iap.purchase.submitted", partition: 3, offset: 41, key: Data("user-1".utf8),
                                      value: Data("signed payload".utf8),
                                      headers: [KafkaHeader(key: "ce_type", string: "iap.purchase.submitted.v1"), KafkaHeader(key: "empty", value: nil)])

    static func record(_ writer: EventDeadLetters, stripped: Bool) throws -> KafkaProducerMessage {
        try writer.record(of: message, stage: "verifier", reason: "schemaViolation", detail: "userId: missing", failedAt: failedAt, stripped: stripped)
    }

    @Test func aDeadLetterIsTheDeadLetterEventOnTheDeploymentsTopic() throws {
        let writer = EventDeadLetters(codec: Self.codec, keepValueBytes: 6)
        let record = try Self.record(writer, stripped: false)
        let expected = try Self.codec.message(DeadLetter(reason: "schemaViolation", detail: "userId: missing", stage: "verifier", message: Self.message,
                                                         failedAt: Self.failedAt, keepValueBytes: 6), time: Self.failedAt)
        #expect(record.topic == "staging.iap.deadletter")
        #expect(record.key == Data("user-1".utf8), "kept on the user's partition")
        #expect(record.value == expected.value, "the body, byte for byte")
        #expect(record.headers.map(\.key) == expected.headers.map(\.key))
        #expect(record.headers.first { $0.key == "ce_id" }?.stringValue == "deadletter:staging.iap.purchase.submitted:3:41")
        let letter = try Self.codec.decodeBody(try #require(record.value), as: DeadLetter.self).get()
        #expect(letter.value.flatMap { Data(base64Encoded: $0) } == Data("signed".utf8), "keeps what it is allowed to of the value")
        #expect(letter.valueTruncated == true && letter.headers.count == 2)
    }

    @Test func aStrippedDeadLetterKeepsTheReasonAndOriginWithoutTheBytes() throws {
        let writer = EventDeadLetters(codec: Self.codec)
        let record = try Self.record(writer, stripped: true)
        #expect(record.topic == "staging.iap.deadletter")
        let letter = try Self.codec.decodeBody(try #require(record.value), as: DeadLetter.self).get()
        #expect(letter.reason == "schemaViolation" && letter.stage == "verifier")
        #expect(letter.sourceTopic == "staging.iap.purchase.submitted" && letter.sourcePartition == 3 && letter.sourceOffset == 41)
        #expect(letter.key == nil && letter.value == nil && letter.headers.isEmpty)
        #expect(letter.valueBytes == 14 && letter.valueTruncated == true)
        let whole = DeadLetter(reason: "schemaViolation", detail: "userId: missing", stage: "verifier", message: Self.message, failedAt: Self.failedAt)
        #expect(record.value == (try Self.codec.message(whole.stripped, time: Self.failedAt)).value, "the body, byte for byte")
    }
}

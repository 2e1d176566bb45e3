import Foundation
import Kafka
import PurchaseEvents
import WorkerRuntime

/// The pipeline's dead letters: `deadletter` events (`schemas/deadletter.v1.schema.json`) on the deployment's
/// dead-letter topic, with their CloudEvents headers.
public struct EventDeadLetters: DeadLetterWriter {
    public let codec: EventCodec
    /// How much of a dead-lettered message's value its dead letter keeps (see `DeadLetter.init`).
    public let keepValueBytes: Int

    public init(codec: EventCodec, keepValueBytes: Int = DeadLetter.maxValueBytes) {
        self.codec = codec
        self.keepValueBytes = keepValueBytes
    }

    public func record(of message: KafkaMessage, stage: String, reason: String, detail: String, failedAt: Date,
                       stripped: Bool) throws -> KafkaProducerMessage {
        let letter = DeadLetter(reason: reason, detail: detail, stage: stage, message: message, failedAt: failedAt, keepValueBytes: keepValueBytes)
        return try codec.message(stripped ? letter.stripped : letter, time: Date())
    }
}

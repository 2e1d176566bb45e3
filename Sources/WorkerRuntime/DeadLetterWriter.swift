import Foundation
import Kafka

/// Builds the dead-letter records of a runner. The runner decides when a message is a dead letter and publishes the
/// record; what the record says, and on which topic, is the application's (its topics, its event format).
public protocol DeadLetterWriter: Sendable {
    /// The record that keeps `message` whole (its bytes, headers and origin) with why `stage` gave it up: `reason`, a
    /// short stable word for dashboards and filters, and `detail`, for a person.
    /// - Parameter stripped: the record without the original bytes, published when the broker refuses the whole one
    ///   (e.g. too large for its limits), so that the reason and the source coordinates are kept rather than the stage
    ///   stopped.
    func record(of message: KafkaMessage, stage: String, reason: String, detail: String, failedAt: Date, stripped: Bool) throws -> KafkaProducerMessage
}

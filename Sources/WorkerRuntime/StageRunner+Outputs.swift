import Foundation
import Kafka

/// What a runner publishes: the stage's outputs, and dead letters.
extension StageRunner {
    /// Sends `messages` and returns once the broker acknowledged all of them; throws the first failure.
    func publish(_ messages: [KafkaProducerMessage]) async throws {
        let sent = ContinuousClock.now
        if let failure = await acknowledged(await producer.enqueue(contentsOf: messages), sentAt: sent) { throw failure }
    }

    /// `iap_events_published_total{stage,type}`: a handled message's outputs (and dead letters) the broker took, by
    /// CloudEvents type (`ce_type`; a bounded set, the codec's), once per message handled: not parked records, which keep
    /// their original's type, nor outputs sent again.
    func countPublished(_ messages: [KafkaProducerMessage]) { series.published.count(messages) }

    /// Awaits the broker's answers for `pending`; the first failure, if any.
    func acknowledged(_ pending: PendingDeliveries, sentAt: ContinuousClock.Instant) async -> KafkaError? {
        let results = await pending.results()
        if !results.isEmpty { // nothing sent, nothing to time
            metrics.observe(series.publishDuration, duration: ContinuousClock.now - sentAt)
        }
        for case .failure(let error) in results { return error }
        return nil
    }

    /// Publishes the dead letter of `message` (`deadLetters` says what it holds) and returns once acknowledged.
    func deadLetter(_ message: KafkaMessage, reason: String, detail: String) async throws {
        let failedAt = Date()
        func record(stripped: Bool) throws -> KafkaProducerMessage {
            try deadLetters.record(of: message, stage: stage.name, reason: reason, detail: detail, failedAt: failedAt, stripped: stripped)
        }
        do {
            let whole = try record(stripped: false)
            try await publish([whole])
            countPublished([whole])
        } catch let error as KafkaError where !error.isRetriable {
            // The broker refuses the record itself (e.g. too large for its limits): keep the reason and the
            // source coordinates, without the original bytes, rather than stop the stage.
            logger.error("dead letter refused; publishing it without the original bytes", ["error": error.description])
            let stripped = try record(stripped: true)
            try await publish([stripped])
            countPublished([stripped])
        }
        count("deadLettered", reason: reason)
        logger.warning("dead-lettered", ["topic": message.topic, "partition": message.partition, "offset": message.offset, "reason": reason])
    }
}

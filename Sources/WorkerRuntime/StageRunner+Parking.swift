import Foundation
import Kafka

/// The message's key has a parked message (`first`, the oldest): this one waits behind it, parked too.
struct ParkedAhead: Error {
    let first: ParkedOrigin
}

/// The parking ledger failed: our side, not the message's, so it is retried and never dead-lettered.
struct ParkingLedgerError: Error, CustomStringConvertible {
    let underlying: any Error
    var description: String { "parking ledger: \(underlying)" }
}

extension Parking {
    /// Calls the ledger; its failures become `ParkingLedgerError`.
    func withLedger<T>(_ call: (any ParkingLedger) async throws -> T) async throws -> T {
        do { return try await call(ledger) } catch { throw ParkingLedgerError(underlying: error) }
    }
}

/// Parking and re-driving.
///
/// A message from the input still failing transiently after `retryBudget` is parked: recorded in the ledger
/// (stage, origin, key), then published on the retry topic with its origin, when it was parked and when it is
/// due (`parkedDelay` later). Its partition then moves on. A later message whose key has a parked message is
/// parked behind it without being handled, so a user's events keep their order; the ledger lives in the store,
/// so this holds for whichever replica owns the partition, after rebalances and restarts too. A message whose
/// own entry is in the ledger (the process stopped between recording and committing) is parked again; the
/// duplicate record is skipped by the re-driver, which handles a parked record only while its entry exists.
///
/// The re-driver is a consumer of the retry topic in a group of the stage's own. Records of one key share a
/// partition of the retry topic, so it meets them in the order they were parked: it waits until each is due,
/// hands it to the stage as first received and retries it in place (growing delays, holding only that retry
/// partition) until it is done — outputs acknowledged, or a dead letter, `parkedTooLong` after `parkedBudget` —
/// then removes its entry, which lets the key's later messages through.
extension StageRunner {
    /// Records and publishes `message` as parked; `false` (logged) when either failed, to be tried again.
    /// - Parameters:
    ///   - holdsKey: whether the key's later messages wait behind it (not for a re-check: it was answered).
    ///   - parkedAt: when it was first parked (a re-check parked again keeps it, for `parkedBudget`).
    func park(_ message: KafkaMessage, reason: String, holdsKey: Bool = true, delay: Duration? = nil, parkedAt: Date? = nil) async -> Bool {
        guard let parking else { return false }
        let now = Date()
        let origin = ParkedOrigin(stage: stage.name, topic: message.topic, partition: message.partition, offset: message.offset)
        do {
            try await parking.withLedger { ledger in
                try await ledger.recordParked(origin, key: holdsKey ? ParkedRecord.orderingKey(message) : nil, reason: reason, at: parkedAt ?? now)
            }
            try await publish([ParkedRecord.record(message, stage: stage.name, reason: reason, parkedAt: parkedAt ?? now,
                                                   due: now.addingTimeInterval(Double((delay ?? configuration.parkedDelay).milliseconds) / 1000),
                                                   topic: parking.topic)])
        } catch {
            // The entry stays if the record did not go out: the message is then parked again at its next attempt.
            logger.error("cannot park; retrying in place", ["topic": message.topic, "partition": message.partition, "offset": message.offset,
                                                            "error": "\(error)"])
            return false
        }
        count("parked")
        // An error: a message parked is a purchase or an event held up by something an operator should look at.
        logger.error("parked on the retry topic", ["topic": message.topic, "partition": message.partition, "offset": message.offset,
                                                   "retryTopic": parking.topic, "reason": String(reason.prefix(500))])
        return true
    }

    /// Handles a record of the retry topic: this stage's, once due, until it is done; then its ledger entry goes.
    func redrive(_ record: KafkaMessage) async throws {
        guard let parking else { return }
        guard let parked = ParkedRecord(record) else {
            logger.warning("record on the retry topic without its origin; skipped", ["partition": record.partition, "offset": record.offset])
            return
        }
        guard parked.origin.stage == stage.name else { return }
        let holding = Holding(consumer: parking.consumer, partition: record.topicPartition)
        let wait = parked.due.timeIntervalSinceNow
        if wait > 0 { try await sleep(.milliseconds(Int64(wait * 1000)), holding: holding) }
        guard try await inPlace(holding, { try await parking.withLedger { try await $0.isParked(parked.origin) } }) else {
            return // Re-driven before: this record is a duplicate.
        }
        let message = parked.original
        let mode = RetryMode.redrive(parkedAt: parked.parkedAt)
        guard try await processWithRetries(message, first: await attempt(message, mode: mode), mode: mode, holding: holding) == .done else {
            return // A re-check parked again: its entry stays.
        }
        try await inPlace(holding) { try await parking.withLedger { try await $0.releaseParked(parked.origin) } }
        count("redriven")
        logger.info("re-driven", ["topic": message.topic, "partition": message.partition, "offset": message.offset])
    }

    /// After a stage answered `.recheck`: parks `message` to be handed back after `after` (from the input), or after
    /// a delay growing with its age (re-driven), until `parkedBudget`. Whether it was parked; throws when parking
    /// failed, to be retried.
    func recheckLater(_ message: KafkaMessage, after: Duration, mode: RetryMode) async throws -> Bool {
        guard parking != nil else { return false }
        var delay = after
        var firstParked: Date?
        if case .redrive(let parkedAt) = mode {
            let age = Date().timeIntervalSince(parkedAt)
            guard age < Double(configuration.parkedBudget.milliseconds) / 1000 else {
                logger.info("re-checks ended: parked for the whole budget", ["topic": message.topic, "partition": message.partition, "offset": message.offset])
                return false
            }
            delay = min(max(after, .milliseconds(Int64(age * 1000))), .seconds(3600))
            firstParked = parkedAt
        }
        guard await park(message, reason: "re-check", holdsKey: false, delay: delay, parkedAt: firstParked) else {
            throw TransientError("cannot park the message for its re-check")
        }
        return true
    }

    /// `body`, retried with backoff while it fails and `holding` stays assigned.
    private func inPlace<T>(_ holding: Holding, _ body: () async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            do {
                return try await body()
            } catch {
                attempt += 1
                let delay = backoff(attempt)
                logger.warning("re-driver: retrying", ["attempt": attempt, "delayMs": delay.milliseconds, "error": "\(error)"])
                try await sleep(delay, holding: holding)
            }
        }
    }
}

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

/// Parking: setting a message aside on the retry topic so that its partition moves on.
///
/// A message from the input still failing transiently after `retryBudget` is parked: recorded in the ledger
/// (stage, origin, key, and the token of its record), then published on the retry topic with its origin, when it
/// was parked and when it is due (`parkedDelay` later). Its partition then moves on. A later message whose key has
/// a parked message is parked behind it without being handled, so a user's events keep their order; the ledger
/// lives in the store, so this holds for whichever replica owns the partition, after rebalances and restarts too.
/// A message whose own entry is in the ledger (the process stopped between recording and committing) is parked
/// again under a new token.
///
/// A message the stage answered with `.recheck` is parked too once its answer is published, as a re-check: under no
/// key (nothing waits behind it), only to be asked about again.
///
/// The re-driver (`StageRunner+Redriver.swift`) hands parked messages back to the stage once due.
extension StageRunner {
    /// The key `message` keeps its order by in the parking ledger; nil when it keeps none (keyless, or not
    /// `MessageStage.keepsOrder`).
    func orderingKey(_ message: KafkaMessage) -> OrderingKey? { stage.keepsOrder(message) ? ParkedRecord.orderingKey(message) : nil }

    /// Parks `record` from the input: the ledger entry first (so that a crash before the publish is seen when the
    /// uncommitted input comes again), then the record. A record the broker refuses outright (too large, no such
    /// topic) becomes a dead letter (`parkingRefused`) instead, and the message is done all the same.
    func park(_ record: ParkedRecord, recheck: Bool) async throws {
        guard let parking else { return }
        let key = recheck ? nil : orderingKey(record.original)
        try await parking.withLedger { ledger in
            try await ledger.recordParked(record.origin, key: key, recheck: recheck, token: record.token, reason: record.reason, at: record.parkedAt)
        }
        do {
            try await publish([record.message(topic: parking.topic)])
        } catch let error as KafkaError where !error.isRetriable {
            try await deadLetter(record.original, reason: "parkingRefused", detail: "the retry topic refused it: \(error)")
            try await parking.withLedger { try await $0.releaseParked(record.origin) }
            return
        } catch {
            // A keyed entry brings the message back here (it is parked behind itself); one without a key would stay
            // behind if the message were then handled in place.
            if key == nil {
                do { try await parking.withLedger { try await $0.releaseParked(record.origin) } } catch {
                    logger.error("parking ledger entry left without its record", ["origin": record.origin.description, "error": "\(error)"])
                }
            }
            throw error
        }
        if recheck {
            count("rechecks")
            logger.info("set aside to be asked about again", ["topic": record.origin.topic, "partition": record.origin.partition,
                                                              "offset": record.origin.offset])
        } else {
            count("parked")
            // An error: a message parked is a purchase or an event held up by something an operator should look at.
            logger.error("parked on the retry topic", ["topic": record.origin.topic, "partition": record.origin.partition,
                                                       "offset": record.origin.offset, "retryTopic": parking.topic,
                                                       "reason": String(record.reason.prefix(500))])
        }
    }

    /// Parks `message` after it failed (or behind its key's parked message); `false` (logged) when that failed, to be tried again.
    func parkTried(_ message: KafkaMessage, reason: String) async throws -> Bool {
        do {
            let now = Date()
            try await park(ParkedRecord(parking: message, stage: stage.name, reason: reason, answered: false, at: now,
                                        due: configuration.parkedSchedule.due(from: now)), recheck: false)
            return true
        } catch {
            logger.error("cannot park; retrying in place", ["topic": message.topic, "partition": message.partition, "offset": message.offset,
                                                            "error": "\(error)"])
            return false
        }
    }
}

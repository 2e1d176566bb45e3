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
/// (stage, origin, key, and the token of its record), then published on the retry topic with its origin, when it
/// was parked and when it is due (`parkedDelay` later). Its partition then moves on. A later message whose key has
/// a parked message is parked behind it without being handled, so a user's events keep their order; the ledger
/// lives in the store, so this holds for whichever replica owns the partition, after rebalances and restarts too.
/// A message whose own entry is in the ledger (the process stopped between recording and committing) is parked
/// again under a new token.
///
/// The re-driver is a consumer of the retry topic in a group of the stage's own. It handles only the record the
/// ledger names (others are left over from a crash), never holds its partition for long — a record not yet due
/// waits at most `parkedDelay`, then goes round again (published anew) — and keeps a key's order through the
/// ledger: a record whose key has an earlier parked message goes round again until that one is done. A due record
/// is handed to the stage as first received; done (outputs acknowledged, or a dead letter) its entry goes, which
/// lets the key's later messages through. Still failing, it is parked again with a delay doubling from
/// `parkedDelay` up to `maxParkedDelay` (an hour by default), its new record published before the ledger names it
/// (a crash in between leaves the old one current, handled again: never none); past `parkedBudget` it becomes a
/// dead letter (`parkedTooLong`).
///
/// A `.recheck` answer's outputs are published once, the first time the stage gives it: on the input side, or by the
/// re-driver for a message parked failing or behind its key (its record's `answered` header says which); later
/// re-checks, and the last one past `parkedBudget`, publish nothing. A crash between that publish and the record
/// marked answered publishes the answer again (a repeat, which changes nothing), never not at all.
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
            try await park(ParkedRecord(parking: message, stage: stage.name, reason: reason, answered: false, at: Date(),
                                        due: Date().addingTimeInterval(configuration.parkedDelay.seconds)), recheck: false)
            return true
        } catch {
            logger.error("cannot park; retrying in place", ["topic": message.topic, "partition": message.partition, "offset": message.offset,
                                                            "error": "\(error)"])
            return false
        }
    }

    /// Handles a record of the retry topic (see above).
    func redrive(_ record: KafkaMessage) async throws {
        guard let parking else { return }
        guard let parked = ParkedRecord(record) else {
            logger.warning("record on the retry topic without its origin; skipped", ["partition": record.partition, "offset": record.offset])
            return
        }
        guard parked.origin.stage == stage.name,
              try await inPlace({ try await parking.withLedger { try await $0.parkedToken(parked.origin) } }) == parked.token else { return }
        let wait = parked.due.timeIntervalSinceNow
        if wait > 0 {
            try await sleep(.milliseconds(Int64(min(wait, configuration.parkedDelay.seconds) * 1000)))
            if parked.due > Date() { return try await goRound(parked, due: parked.due) }
        }
        let message = parked.original
        if let key = orderingKey(message) {
            let ahead = try await inPlace { try await parking.withLedger { try await $0.parked(stage: self.stage.name, key: key) } }
            if let first = ahead.first, first != parked.origin, ahead.contains(parked.origin) {
                return try await goRound(parked, due: Date().addingTimeInterval(configuration.parkedDelay.seconds))
            }
        }
        let age = Date().timeIntervalSince(parked.parkedAt)
        let overBudget = age >= configuration.parkedBudget.seconds
        do {
            switch try await stage.handle(message) {
            case .publish(let outputs):
                try await publish(outputs)
            case .deadLetter(let reason, let detail):
                try await deadLetter(message, reason: reason, detail: detail)
            case .recheck(let outputs, let after):
                // Its answer is published the first time the stage gives it: when it came from the input, or here for a
                // message parked failing or behind its key. Then it is only asked about again, less and less often.
                if !parked.answered { try await publish(outputs) }
                if !overBudget {
                    return try await parkAgain(parked, after: min(max(after.seconds, age), configuration.maxParkedDelay.seconds), reason: "re-check",
                                               recheck: true)
                }
                logger.info("re-checks ended: set aside for the whole budget", ["topic": message.topic, "offset": message.offset])
            }
        } catch let error where isTransient(error) && !overBudget {
            let delay = min(configuration.parkedDelay.seconds * Double(1 << min(parked.attempts + 1, 16)), configuration.maxParkedDelay.seconds)
            logger.warning("re-driven message failed; parked again", ["topic": message.topic, "partition": message.partition, "offset": message.offset,
                                                                      "delaySeconds": Int(delay), "error": "\(error)"])
            return try await parkAgain(parked, after: delay, reason: "\(error)", recheck: false)
        } catch {
            try await inPlace {
                try await self.deadLetter(message, reason: self.isTransient(error) ? "parkedTooLong" : "processingFailed", detail: "\(error)")
            }
        }
        try await inPlace { try await parking.withLedger { try await $0.releaseParked(parked.origin) } }
        count("redriven")
        logger.info("re-driven", ["topic": message.topic, "partition": message.partition, "offset": message.offset])
    }

    /// Publishes `parked` again as it is, due at `due`: it stays current.
    private func goRound(_ parked: ParkedRecord, due: Date) async throws {
        guard let parking else { return }
        let again = parked.again(due: due, attempts: parked.attempts, reason: parked.reason, renamed: false)
        try await inPlace { try await self.publish([again.message(topic: parking.topic)]) }
    }

    /// Parks a re-driven message again under a new record: published first, then named in the ledger. `recheck`: its
    /// answer was just published (or before), so the record says so.
    private func parkAgain(_ parked: ParkedRecord, after delay: TimeInterval, reason: String, recheck: Bool) async throws {
        guard let parking else { return }
        var next = parked.again(due: Date().addingTimeInterval(delay), attempts: parked.attempts + 1, reason: reason, renamed: true)
        if recheck { next.answered = true }
        try await inPlace { try await self.publish([next.message(topic: parking.topic)]) }
        try await inPlace {
            try await parking.withLedger { ledger in
                try await ledger.recordParked(next.origin, key: recheck ? nil : orderingKey(next.original), recheck: recheck,
                                              token: next.token, reason: reason, at: next.parkedAt)
            }
        }
    }

    /// `body`, retried with backoff while it fails and the partition stays assigned.
    private func inPlace<T>(_ body: () async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            do {
                return try await body()
            } catch {
                attempt += 1
                let delay = backoff(attempt)
                logger.warning("re-driver: retrying", ["attempt": attempt, "delayMs": delay.milliseconds, "error": "\(error)"])
                try await sleep(delay)
            }
        }
    }
}

import Foundation
import Kafka

/// Re-driving: handing parked messages back to the stage.
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
///
/// `ParkedSchedule` decides when a parked message is tried again and when it has spent its budget.
extension StageRunner {
    /// Handles a record of the retry topic (see above).
    func redrive(_ record: KafkaMessage) async throws {
        guard let parking else { return }
        guard let parked = ParkedRecord(record) else {
            logger.warning("record on the retry topic without its origin; skipped", ["partition": record.partition, "offset": record.offset])
            return
        }
        guard parked.origin.stage == stage.name,
              try await inPlace("re-driver", { try await parking.withLedger { try await $0.parkedToken(parked.origin) } }) == parked.token else { return }
        let schedule = configuration.parkedSchedule
        if let hold = schedule.hold(due: parked.due, now: Date()) {
            try await sleep(hold)
            if parked.due > Date() { return try await goRound(parked, due: parked.due) }
        }
        let message = parked.original
        if let key = orderingKey(message) {
            let ahead = try await inPlace { try await parking.withLedger { try await $0.parked(stage: self.stage.name, key: key) } }
            if let first = ahead.first, first != parked.origin, ahead.contains(parked.origin) {
                return try await goRound(parked, due: schedule.due(from: Date()))
            }
        }
        let age = Date().timeIntervalSince(parked.parkedAt)
        let overBudget = schedule.isOverBudget(age: age)
        do {
            switch try await handled(message) {
            case .publish(let outputs):
                try await publish(outputs)
                countPublished(outputs)
            case .deadLetter(let reason, let detail):
                try await deadLetter(message, reason: reason, detail: detail)
            case .recheck(let outputs, let after):
                // Its answer is published the first time the stage gives it: when it came from the input, or here for a
                // message parked failing or behind its key. Then it is only asked about again, less and less often.
                if !parked.answered {
                    try await publish(outputs)
                    countPublished(outputs)
                }
                if !overBudget {
                    return try await parkAgain(parked, after: schedule.recheckDelay(after: after, age: age), reason: "re-check", recheck: true)
                }
                logger.info("re-checks ended: set aside for the whole budget", ["topic": message.topic, "offset": message.offset])
            }
        } catch let error where isTransient(error) && !overBudget {
            let delay = schedule.delay(afterFailedAttempts: parked.attempts)
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

    /// `body`, retried with backoff while it fails and the partition stays assigned; `doing` says what in the log.
    func inPlace<T>(_ doing: String = "re-driver", _ body: () async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            do {
                return try await body()
            } catch {
                attempt += 1
                let delay = configuration.backoff.delay(attempt)
                logger.warning("\(doing): retrying", ["attempt": attempt, "delayMs": delay.milliseconds, "error": "\(error)"])
                try await sleep(delay)
            }
        }
    }
}

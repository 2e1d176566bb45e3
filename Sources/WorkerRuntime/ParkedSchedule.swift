import Foundation
import Kafka

/// When the re-driver tries a parked message again, and when it gives up on it. Pure: `StageRunner.redrive` does
/// what it answers. Times are `TimeInterval`s (seconds) because parked records carry dates.
struct ParkedSchedule: Equatable {
    /// The first wait after parking, and the longest a record not yet due is held before it goes round again.
    var parkedDelay: Duration
    /// The longest wait between tries of a parked message.
    var maxParkedDelay: Duration
    /// How long after it was first parked a message still failing becomes a dead letter.
    var parkedBudget: Duration

    /// `parkedDelay` after `now`: when a message parked now is first due, and when a record held behind an earlier
    /// parked message of its key is looked at again.
    func due(from now: Date) -> Date { now.addingTimeInterval(parkedDelay.seconds) }

    /// How long to hold a record due at `due` before looking at it again (at most `parkedDelay`, so that the
    /// re-driver's partition moves on); nil when it is due.
    func hold(due: Date, now: Date) -> Duration? {
        let wait = due.timeIntervalSince(now)
        guard wait > 0 else { return nil }
        return .milliseconds(Int64(min(wait, parkedDelay.seconds) * 1000))
    }

    /// Whether a message first parked `age` ago has spent its budget: a failure then makes it a dead letter, and a
    /// re-check answer ends its re-checks.
    func isOverBudget(age: TimeInterval) -> Bool { age >= parkedBudget.seconds }

    /// The wait after the re-drive of a message tried `attempts` times before failed: `parkedDelay` doubled for each try
    /// (at most 2¹⁶ times), at most `maxParkedDelay`.
    func delay(afterFailedAttempts attempts: Int) -> TimeInterval {
        min(parkedDelay.seconds * Double(1 << min(attempts + 1, 16)), maxParkedDelay.seconds)
    }

    /// The wait before asking again about a message the stage wants re-checked `after`, first parked `age` ago: at
    /// least its age, so that re-checks thin out, at most `maxParkedDelay`.
    func recheckDelay(after: Duration, age: TimeInterval) -> TimeInterval { min(max(after.seconds, age), maxParkedDelay.seconds) }
}

import Foundation
import Testing
@testable import WorkerRuntime

/// The arithmetic of the waits: in place on a partition (`Backoff`), and on the retry topic (`ParkedSchedule`).
@Suite struct BackoffTests {
    let backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(30))

    @Test func eachWaitDoublesUpToTheMaximumAndIsDrawnFromItsUpperHalf() {
        #expect(backoff.range(1) == 50...100)
        #expect(backoff.range(2) == 100...200)
        #expect(backoff.range(3) == 200...400)
        #expect(backoff.range(9) == 12_800...25_600)
        #expect(backoff.range(10) == 15_000...30_000, "capped")
        #expect(backoff.range(1_000) == 15_000...30_000, "the doubling stops before it overflows")
        for attempt in [1, 2, 5, 10] {
            for _ in 0..<20 {
                let delay = backoff.delay(attempt)
                #expect(backoff.range(attempt).contains(delay.milliseconds), "attempt \(attempt): \(delay)")
            }
        }
    }

    @Test func aWaitOfNothingStaysNothing() {
        let none = Backoff(initial: .zero, maximum: .seconds(1))
        #expect(none.range(3) == 0...0)
        #expect(none.delay(3) == .zero)
    }

    @Test func aRetryAfterLongerThanTheBackoffIsWaitedOutUpToTwoMinutes() {
        #expect(backoff.delay(1, retryAfter: .seconds(7)) == .seconds(7))
        #expect(backoff.delay(1, retryAfter: .seconds(600)) == Backoff.maxRetryAfter)
        #expect(Backoff.maxRetryAfter == .seconds(120))
        let shorter = backoff.delay(3, retryAfter: .milliseconds(1))
        #expect(backoff.range(3).contains(shorter.milliseconds), "a shorter Retry-After does not shorten the backoff: \(shorter)")
        #expect(backoff.range(3).contains(backoff.delay(3, retryAfter: nil).milliseconds))
        #expect(Backoff.retryDelay(backoff: .seconds(1), after: TransientError("rate limited", retryAfter: .seconds(9))) == .seconds(9))
        #expect(Backoff.retryDelay(backoff: .seconds(1), after: TransientError("no hint")) == .seconds(1))
        #expect(Backoff.retryDelay(backoff: .seconds(1), after: CancellationError()) == .seconds(1))
    }
}

@Suite struct ParkedScheduleTests {
    let schedule = ParkedSchedule(parkedDelay: .seconds(60), maxParkedDelay: .seconds(3600), parkedBudget: .seconds(86_400))
    let now = Date(timeIntervalSince1970: 1_764_410_000)

    @Test func aRecordNotYetDueIsHeldAtMostTheParkedDelay() {
        #expect(schedule.hold(due: now.addingTimeInterval(2.5), now: now) == .milliseconds(2_500))
        #expect(schedule.hold(due: now.addingTimeInterval(7_200), now: now) == .seconds(60), "then it goes round")
        #expect(schedule.hold(due: now, now: now) == nil, "due")
        #expect(schedule.hold(due: now.addingTimeInterval(-1), now: now) == nil)
        #expect(schedule.due(from: now) == now.addingTimeInterval(60))
    }

    @Test func aFailingRedriveWaitsDoubleEachTimeUpToTheMaximum() {
        #expect(schedule.delay(afterFailedAttempts: 0) == 120)
        #expect(schedule.delay(afterFailedAttempts: 1) == 240)
        #expect(schedule.delay(afterFailedAttempts: 4) == 1_920)
        #expect(schedule.delay(afterFailedAttempts: 5) == 3_600, "capped")
        let unbounded = ParkedSchedule(parkedDelay: .milliseconds(1), maxParkedDelay: .seconds(1_000_000), parkedBudget: .zero)
        #expect(unbounded.delay(afterFailedAttempts: 15) == 65.536)
        #expect(unbounded.delay(afterFailedAttempts: 40) == 65.536, "the doubling stops at 2¹⁶")
    }

    @Test func reChecksThinOutWithTheMessagesAge() {
        #expect(schedule.recheckDelay(after: .seconds(30), age: 10) == 30, "young: as the stage asked")
        #expect(schedule.recheckDelay(after: .seconds(30), age: 600) == 600, "older: at least its age")
        #expect(schedule.recheckDelay(after: .seconds(30), age: 50_000) == 3_600, "at most the longest wait")
    }

    @Test func theBudgetIsSpentAtItsEnd() {
        #expect(!schedule.isOverBudget(age: 86_399.9))
        #expect(schedule.isOverBudget(age: 86_400))
        #expect(ParkedSchedule(parkedDelay: .seconds(1), maxParkedDelay: .seconds(1), parkedBudget: .zero).isOverBudget(age: 0))
    }
}

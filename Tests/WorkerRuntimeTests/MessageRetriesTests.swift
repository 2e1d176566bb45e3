import Testing
@testable import WorkerRuntime

/// A message's retries on its partition: backoff between tries, parking once the retry budget is spent.
@Suite struct MessageRetriesTests {
    let backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(30))
    let started = ContinuousClock.now

    /// The wait of an action, and whether it parks.
    static func wait(_ action: MessageRetries.Action) -> (parks: Bool, Duration) {
        switch action {
        case .park(let otherwise): (true, otherwise)
        case .retry(let after): (false, after)
        }
    }

    @Test func transientFailuresAreRetriedWithGrowingWaitsUntilTheBudgetIsSpentThenParked() {
        var retries = MessageRetries(backoff: backoff, budget: .seconds(300), started: started)
        for attempt in 1...3 {
            let (parks, delay) = Self.wait(retries.failed(.transient(retryAfter: nil), at: started + .seconds(10 * attempt)))
            #expect(!parks, "within the budget")
            #expect(backoff.range(attempt).contains(delay.milliseconds), "attempt \(attempt): \(delay)")
        }
        let (parks, otherwise) = Self.wait(retries.failed(.transient(retryAfter: nil), at: started + .seconds(300)))
        #expect(parks, "the budget is spent")
        #expect(backoff.range(4).contains(otherwise.milliseconds), "should parking fail, the next wait: \(otherwise)")
        #expect(retries.attempts == 4)
    }

    @Test func withoutABudgetTransientFailuresAreRetriedForever() {
        var retries = MessageRetries(backoff: backoff, budget: nil, started: started)
        for attempt in 1...30 {
            let (parks, delay) = Self.wait(retries.failed(.transient(retryAfter: nil), at: started + .seconds(86_400 * attempt)))
            #expect(!parks)
            #expect(backoff.range(attempt).contains(delay.milliseconds))
        }
        #expect(backoff.range(30) == 15_000...30_000)
    }

    @Test func aRetryAfterIsWaitedOut() {
        var retries = MessageRetries(backoff: backoff, budget: .seconds(300), started: started)
        #expect(retries.failed(.transient(retryAfter: .seconds(45)), at: started) == .retry(after: .seconds(45)))
        #expect(retries.failed(.transient(retryAfter: .seconds(3_600)), at: started) == .retry(after: .seconds(120)), "at most two minutes")
        #expect(retries.failed(.transient(retryAfter: .seconds(45)), at: started + .seconds(301)) == .park(otherwise: .seconds(45)))
    }

    @Test func aMessageBehindAParkedOneIsParkedAtOnce() {
        var retries = MessageRetries(backoff: backoff, budget: .seconds(300), started: started)
        let (parks, otherwise) = Self.wait(retries.failed(.parkedAhead, at: started))
        #expect(parks, "parked without waiting for the budget")
        #expect(backoff.range(1).contains(otherwise.milliseconds))
    }

    @Test func anUnpublishedDeadLetterIsTriedAgainAfterABackoffAndNeverParked() {
        var retries = MessageRetries(backoff: backoff, budget: .zero, started: started)
        let (parks, delay) = Self.wait(retries.failed(.deadLetterUnpublished, at: started + .seconds(1_000)))
        #expect(!parks, "a dead letter is not parked, whatever the budget")
        #expect(backoff.range(1).contains(delay.milliseconds))
        let (_, next) = Self.wait(retries.failed(.deadLetterUnpublished, at: started + .seconds(1_000)))
        #expect(backoff.range(2).contains(next.milliseconds))
    }
}

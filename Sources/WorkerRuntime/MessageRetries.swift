/// The retries of one input message on its partition: how long to wait before each next try, and when its retry
/// budget is spent so that it is parked instead. Pure: `StageRunner.processWithRetries` does what it answers. (A
/// failure the stage does not call transient makes the message a dead letter, without a retry.)
struct MessageRetries {
    /// Why a try did not finish the message.
    enum Failure: Equatable {
        /// Its key has a parked message: it goes behind it.
        case parkedAhead
        /// Worth retrying; `retryAfter`: how long the other side asked us to wait.
        case transient(retryAfter: Duration?)
        /// It is a dead letter, and publishing that failed in a way that may succeed later.
        case deadLetterUnpublished
    }

    enum Action: Equatable {
        /// Park the message; should parking fail, wait `otherwise` and try the message again.
        case park(otherwise: Duration)
        /// Wait, then try the message again.
        case retry(after: Duration)
    }

    let backoff: Backoff
    /// How long transient failures are retried in place before the message is parked; nil: until done (no parking, or
    /// the message cannot be parked).
    let budget: Duration?
    /// When the message was first tried.
    let started: ContinuousClock.Instant
    /// The failed tries that called for a wait so far.
    private(set) var attempts = 0

    init(backoff: Backoff, budget: Duration?, started: ContinuousClock.Instant) {
        self.backoff = backoff
        self.budget = budget
        self.started = started
    }

    /// What to do after a try failed with `failure` at `now`.
    mutating func failed(_ failure: Failure, at now: ContinuousClock.Instant) -> Action {
        switch failure {
        case .parkedAhead:
            attempts += 1
            return .park(otherwise: backoff.delay(attempts))
        case .transient(let retryAfter):
            attempts += 1
            let delay = backoff.delay(attempts, retryAfter: retryAfter)
            if let budget, now - started >= budget { return .park(otherwise: delay) }
            return .retry(after: delay)
        case .deadLetterUnpublished:
            attempts += 1
            return .retry(after: backoff.delay(attempts))
        }
    }
}

import Kafka

/// The waits between tries of one message on its partition: exponential from `initial`, capped at `maximum`, with
/// jitter so that workers retrying together spread out.
public struct Backoff: Sendable, Equatable {
    /// The first wait's cap.
    public var initial: Duration
    /// The longest wait.
    public var maximum: Duration

    public init(initial: Duration, maximum: Duration) {
        self.initial = initial
        self.maximum = maximum
    }

    /// The longest a `Retry-After` holds a partition's retry: a longer wait is the retry budget's and the parking's to handle.
    public static let maxRetryAfter = Duration.seconds(120)

    /// The whole milliseconds the `attempt`-th wait (from 1) is drawn from: [capped/2, capped], `capped` being
    /// `initial` doubled for each attempt after the first (at most 2²⁰ times), at most `maximum`.
    public func range(_ attempt: Int) -> ClosedRange<Int64> {
        let base = initial.milliseconds * Int64(1 << min(attempt - 1, 20))
        let capped = min(base, maximum.milliseconds)
        return capped / 2...max(capped / 2, capped)
    }

    /// The `attempt`-th wait, drawn from `range(attempt)`.
    public func delay(_ attempt: Int) -> Duration { .milliseconds(Int64.random(in: range(attempt))) }

    /// The `attempt`-th wait, or what the other side asked for when that is longer (see `retryDelay`).
    public func delay(_ attempt: Int, retryAfter: Duration?) -> Duration { Self.retryDelay(backoff: delay(attempt), retryAfter: retryAfter) }

    /// `backoff`, or what `error` asked for (`TransientError.retryAfter`) when that is longer, at most `maxRetryAfter`.
    public static func retryDelay(backoff: Duration, after error: any Error) -> Duration {
        retryDelay(backoff: backoff, retryAfter: (error as? TransientError)?.retryAfter)
    }

    /// `backoff`, or `retryAfter` when that is longer, at most `maxRetryAfter`.
    public static func retryDelay(backoff: Duration, retryAfter: Duration?) -> Duration { max(backoff, min(retryAfter ?? .zero, maxRetryAfter)) }
}

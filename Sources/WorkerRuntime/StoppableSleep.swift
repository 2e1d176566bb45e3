extension Clock where Duration == Swift.Duration {
    /// Sleeps for `duration`, or less once `stopped()` is true (looked at every 100 ms): the waits of periodic services and of
    /// retry backoffs, which a graceful shutdown (or a revoked partition) does not have to sit out.
    public func sleep(for duration: Duration, unless stopped: () -> Bool) async throws {
        let deadline = now.advanced(by: duration)
        while now < deadline, !stopped() {
            try await sleep(until: min(deadline, now.advanced(by: .milliseconds(100))), tolerance: nil)
        }
    }
}

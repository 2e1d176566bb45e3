extension GroupWatchdog {
    /// What the watchdog remembers of one group, and decides from it: how long this member has held another slice than
    /// its share, whether a failed description still lets an idle member pass, whether a stall begins or ends, and
    /// when a stalled member may rejoin (at most once per bound). Pure: `GroupWatchdog` looks at the group and acts.
    struct Stall {
        let bound: Duration
        /// The last finding; nil before the first.
        private(set) var status: Status?
        /// Since when this member has held another slice than its share.
        private var mismatchedSince: C.Instant?
        private var lastRejoin: C.Instant?
        /// Descriptions of the group, while this member had no partitions, that failed in a row.
        private var describeFailures = 0

        init(bound: Duration) { self.bound = bound }

        /// This member holds its share, or its share cannot be judged now (no partitions, a rebalance, no description).
        mutating func holdsShare() { mismatchedSince = nil }

        /// This member was found `now` holding another slice than its share: for how long, from the first such finding.
        mutating func holdsOtherSlice(at now: C.Instant) -> Duration {
            let since = mismatchedSince ?? now
            mismatchedSince = since
            return since.duration(to: now)
        }

        /// The group of this member without partitions was described.
        mutating func described() { describeFailures = 0 }

        /// The group of this member without partitions could not be described: the last finding, when that was idle
        /// and this is the first or second failure in a row (they do not turn an idle replica into a stalled one).
        mutating func describeFailed() -> Status? {
            describeFailures += 1
            if case .idle = status, describeFailures < 3 { return status }
            return nil
        }

        /// What a finding calls for.
        struct Outcome: Equatable {
            /// Stalled now, and not at the last finding: an error to log.
            var stallBegins = false
            /// Stalled at the last finding, and no longer.
            var stallEnds = false
            /// The member rejoins the group as a new one.
            var rejoin = false
        }

        /// Records `status`, found `now`. A stall found with the group described (`mayRejoin`) has the member rejoin,
        /// unless it did less than a bound ago; one found without is only reported (an idle replica rejoining would
        /// make its whole group rebalance).
        mutating func found(_ status: Status, mayRejoin: Bool, at now: C.Instant) -> Outcome {
            let wasStalled = if case .stalled = self.status { true } else { false }
            self.status = status
            guard case .stalled = status else { return Outcome(stallEnds: wasStalled) }
            var outcome = Outcome(stallBegins: !wasStalled)
            if mayRejoin, lastRejoin.map({ $0.duration(to: now) >= bound }) ?? true {
                lastRejoin = now
                mismatchedSince = nil
                outcome.rejoin = true
            }
            return outcome
        }
    }
}

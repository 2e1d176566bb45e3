import Foundation

/// When the faults happen: each kill and the outage at a random point of progress, spread over the run.
struct ChaosPlan {
    private(set) var kills: [(name: String, at: Double)]
    private(set) var killed: [String: Int] = [:]
    private var outageAt: Double?
    private(set) var outageSeconds: Int
    private var outageEnd: Date?
    private(set) var outageStarted = false

    init(stages: [String], killsPerWorker: Int, outage: Int?) {
        var generator = SystemRandomNumberGenerator()
        let names = stages.flatMap { Array(repeating: $0, count: killsPerWorker) }.shuffled(using: &generator)
        // Kill i lands in the i-th of equal slices of 5 %…90 % progress, at a random point inside it.
        let slice = 0.85 / Double(max(1, names.count))
        kills = names.enumerated().map { index, name in (name, 0.05 + slice * (Double(index) + Double.random(in: 0.1...0.9, using: &generator))) }
        outageAt = outage.map { _ in Double.random(in: 0.3...0.6, using: &generator) }
        outageSeconds = outage ?? 0
    }

    var isComplete: Bool { kills.isEmpty && (outageAt == nil || outageEnd != nil) }

    /// Time between two faults of one stage (a kill, a join, a leave): longer than a member's session (10 s), so that
    /// the group has settled from one before the next. Closer faults are more than a broker sees from a real failure
    /// rate, and the local broker's coordinator (no rebalance timer) can lose a group under them for good: runs that
    /// got twice as fast with batching, their faults at the same points of progress, stalled so in 2 of 3.
    static let spacing: TimeInterval = 15
    private var lastKill: [String: Date] = [:]

    /// The kills due at `progress`, but for a stage whose last fault (`lastFault`, else its last kill) was within `spacing`
    /// of `now`: such a kill waits.
    mutating func killsDue(at progress: Double, now: Date = Date(), lastFault: (String) -> Date? = { _ in nil }) -> [String] {
        var due: [String] = []
        let lastKill = self.lastKill
        kills.removeAll { kill in
            guard kill.at <= progress, !due.contains(kill.name) else { return false }
            let last = [lastKill[kill.name], lastFault(kill.name)].compactMap { $0 }.max()
            guard last.map({ now.timeIntervalSince($0) >= Self.spacing }) ?? true else { return false }
            due.append(kill.name)
            return true
        }
        for name in due {
            killed[name, default: 0] += 1
            self.lastKill[name] = now
        }
        return due
    }

    mutating func outageDue(at progress: Double) -> Bool {
        guard let at = outageAt, !outageStarted, at <= progress else { return false }
        outageStarted = true
        outageEnd = Date().addingTimeInterval(TimeInterval(outageSeconds))
        return true
    }

    func outageEnded(now: Date) -> Bool { outageEnd.map { now >= $0 } ?? false }
}

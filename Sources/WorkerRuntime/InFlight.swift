import Kafka

/// What a partition of a stage's input has in flight, kept where every replica of the stage sees it, so that the
/// message that crashes a worker is found whichever replica owns the partition after the crash.
///
/// Before the stage is handed messages, their offsets are recorded as `handling`; a partition's next batch replaces
/// them, and a batch that is interrupted (shutdown, revocation) clears them. So a mark still `handling` messages at or
/// after the offset its partition resumes from says that the holder stopped while handling them without a shutdown: a
/// crash (a trap, a kill, the node lost).
public struct InFlightMark: Sendable, Equatable {
    /// The offsets handed to the stage and not finished yet; nil when none.
    public var handling: ClosedRange<Int64>?
    /// Offsets that were in flight at an earlier crash: handled one at a time until the partition passes them.
    public var suspect: ClosedRange<Int64>?
    /// Crashes' culprits (suspects the worker trapped on, `TrapRecords`), ascending: each dead-lettered, never handed to
    /// the stage, by whoever reaches it, again if it comes again. Kept until a holder of the partition resumes after
    /// them (they were committed): a culprit dead-lettered and redelivered after a kill is dead-lettered again, not
    /// handed to the stage to trap it once more. At most `maxCulprits`, the latest.
    public var culprits: [Int64]

    /// More culprits of one partition than a holder would dead-letter before its offsets are committed.
    public static let maxCulprits = 32

    public init(handling: ClosedRange<Int64>?, suspect: ClosedRange<Int64>?, culprits: [Int64] = []) {
        self.handling = handling
        self.suspect = suspect
        self.culprits = Array(Set(culprits).sorted().suffix(Self.maxCulprits))
    }
}

extension InFlightMark {
    /// The mark naming `offset` a culprit, when the trap record of the worker that left this mark names it: `offset`
    /// was the suspect in hand alone. nil when the mark says otherwise (the partition moved on, another holder's mark):
    /// the record is stale, and `offset`, if still a suspect, is handled again alone.
    public func confirmingTrap(at offset: Int64) -> InFlightMark? {
        guard handling == offset...offset, suspect?.contains(offset) == true else { return nil }
        return InFlightMark(handling: handling, suspect: suspect, culprits: culprits + [offset])
    }
}

/// Where the runners keep their `InFlightMark`s (the purchase store, beside the parking ledger).
public protocol InFlightLedger: Sendable {
    /// The mark of `stage` on `partition`; nil when it has none.
    func mark(stage: String, partition: TopicPartition) async throws -> InFlightMark?
    /// Replaces the mark of `stage` on `partition`; returns once it is durable enough to outlive this process.
    func setMark(_ mark: InFlightMark, stage: String, partition: TopicPartition) async throws
    /// Replaces the mark of `stage` on `partition` with `mark` only while it is still `held` (nothing when it is another).
    func replaceMark(_ held: InFlightMark, with mark: InFlightMark, stage: String, partition: TopicPartition) async throws
}

/// What a partition's resumption means after the mark its previous holder left. Pure: `StageRunner` reads the mark,
/// asks, and handles the messages as it says.
///
/// Messages in hand at a crash become suspects, handled one at a time with nothing else in hand in the process. A
/// suspect the process traps on is named by the trap's record (`TrapRecords`), which the next process of the stage
/// writes into the mark as its culprit: dead-lettered (`crashedWorker`) and skipped. So a message that crashes its
/// worker every time costs two crashes, and the messages around it are handled as if nothing happened. A kill (SIGKILL,
/// the out-of-memory killer, the node lost) leaves no record: its suspects are handled again, never dead-lettered for it.
struct CrashEvidence: Equatable {
    /// Offsets to handle one at a time, each marked alone before it is handed to the stage.
    var suspect: ClosedRange<Int64>?
    /// Offsets to dead-letter instead of handling.
    var culprits: [Int64]
    /// Whether the previous holder stopped while handling (a crash).
    var crashed: Bool

    /// What `mark` says to a holder resuming the partition at `offset` (the first offset it was handed). `resumed`: at
    /// the offset the partition was committed at (the first batch of an assignment), so that culprits before it are
    /// settled; within an assignment every culprit is kept, for a later holder may get them again.
    init(after mark: InFlightMark?, resumingAt offset: Int64, resumed: Bool = true) {
        guard let mark else {
            self.init(suspect: nil, culprits: [], crashed: false)
            return
        }
        // Suspects the partition has passed are settled; culprits once it resumes after them.
        let stillSuspect = mark.suspect.flatMap { $0.upperBound >= offset ? $0 : nil }
        let culprits = resumed ? mark.culprits.filter { $0 >= offset } : mark.culprits
        guard let handling = mark.handling, handling.upperBound >= offset else {
            self.init(suspect: stillSuspect, culprits: culprits, crashed: false)
            return
        }
        // What was in hand is suspect now, and so are the earlier suspects not reached yet.
        let end = max(handling.upperBound, stillSuspect?.upperBound ?? handling.upperBound)
        self.init(suspect: handling.lowerBound...end, culprits: culprits, crashed: true)
    }

    init(suspect: ClosedRange<Int64>?, culprits: [Int64], crashed: Bool) {
        self.suspect = suspect
        self.culprits = culprits
        self.crashed = crashed
    }
}

/// How a partition's batch is handled under `CrashEvidence`: runs of messages outside the suspect offsets go to the stage
/// as usual; each suspect goes alone. Pure.
enum CrashSegments {
    enum Segment: Equatable {
        /// Messages `range` (indexes into the batch) handled as a batch under one mark.
        case batch(Range<Int>)
        /// The message at this index, handled alone under a mark of its own.
        case alone(Int)
        /// The message at this index, a culprit: dead-lettered, not handed to the stage.
        case culprit(Int)
    }

    /// The segments of a batch whose messages have `offsets` (ascending), `suspect` being the offsets to take one at a
    /// time and `culprits` those to dead-letter.
    static func split(_ offsets: [Int64], suspect: ClosedRange<Int64>?, culprits: [Int64] = []) -> [Segment] {
        var segments: [Segment] = []
        var runStart: Int?
        for (index, offset) in offsets.enumerated() {
            let culprit = culprits.contains(offset)
            if culprit || suspect?.contains(offset) == true {
                if let start = runStart { segments.append(.batch(start..<index)) }
                runStart = nil
                segments.append(culprit ? .culprit(index) : .alone(index))
            } else if runStart == nil {
                runStart = index
            }
        }
        if let start = runStart { segments.append(.batch(start..<offsets.count)) }
        return segments
    }
}

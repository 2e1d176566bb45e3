/// How a partition's consecutive messages are split into runs handed to the stage at once and messages handled alone.
/// Pure: `StageRunner.process(batch:)` asks the parking ledger, calls the stage and completes the messages.
///
/// A run is the messages from `next` on whose keys have nothing parked. The stage answers a prefix of it; a message it
/// did not answer goes alone next (its failure may have been the batch's doing), and the run after it is formed anew.
/// A message whose key has a parked message (or whose key the ledger could not look up) goes alone too.
struct BatchSplit: Equatable {
    /// How many messages there are.
    let count: Int
    /// The first message not taken yet.
    private(set) var next = 0

    init(count: Int) { self.count = count }

    enum Step: Equatable {
        /// Hand these messages to the stage at once (`MessageStage.handle(batch:)`), then report with `answered(_:of:)`.
        case batch(Range<Int>)
        /// Hand this message to the stage alone, retried until done.
        case alone(Int)
    }

    /// What the stage's answers to a run settle.
    struct Answer: Equatable {
        /// The messages whose answers are final, to be completed in order.
        var final: Range<Int>
        /// The message the stage did not answer: handled alone, after `final`.
        var alone: Int?
        /// How many messages the stage decided together (`iap_batch_size`); nil when it answered none.
        var decidedTogether: Int?
        /// The run held several messages (`iap_batches_total`).
        var severalMessages: Bool
        /// It held several and the stage did not answer them all (`iap_batches_cut_total`).
        var cut: Bool
    }

    var isDone: Bool { next >= count }

    /// How many of `keys` from the first have nothing parked: a message without a key (nil) never waits.
    static func unparked(_ keys: some Sequence<OrderingKey?>, parked: Set<OrderingKey>) -> Int {
        keys.prefix { key in key.map { !parked.contains($0) } ?? true }.count
    }

    /// The next step, `unparked` being how many messages from `next` on have nothing parked under their keys.
    mutating func step(unparked: Int) -> Step {
        guard unparked > 0 else {
            next += 1
            return .alone(next - 1)
        }
        return .batch(next..<(next + min(unparked, count - next)))
    }

    /// The stage gave `answered` results for `run` (a prefix of it; more are ignored).
    mutating func answered(_ answered: Int, of run: Range<Int>) -> Answer {
        let taken = min(answered, run.count)
        let final = run.lowerBound..<(run.lowerBound + taken)
        let alone = taken < run.count ? final.upperBound : nil
        next = alone.map { $0 + 1 } ?? final.upperBound
        return Answer(final: final, alone: alone, decidedTogether: answered > 0 ? taken : nil, severalMessages: run.count > 1,
                      cut: run.count > 1 && taken < run.count)
    }
}

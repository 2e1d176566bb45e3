import Testing
@testable import WorkerRuntime

/// How a partition's waiting messages are split into batches and messages handled alone.
@Suite struct BatchSplitTests {
    @Test func messagesWithNothingParkedGoToTheStageAtOnce() {
        var split = BatchSplit(count: 5)
        #expect(split.step(unparked: 5) == .batch(0..<5))
        #expect(split.answered(5, of: 0..<5) == .init(final: 0..<5, alone: nil, decidedTogether: 5, severalMessages: true, cut: false))
        #expect(split.isDone)
    }

    @Test func aBatchAnsweredInPartHasItsFirstUnansweredMessageHandledAloneAndTheRestBatchedAnew() {
        var split = BatchSplit(count: 6)
        #expect(split.step(unparked: 6) == .batch(0..<6))
        #expect(split.answered(2, of: 0..<6) == .init(final: 0..<2, alone: 2, decidedTogether: 2, severalMessages: true, cut: true))
        #expect(split.next == 3)
        #expect(split.step(unparked: 3) == .batch(3..<6))
        #expect(split.answered(3, of: 3..<6).cut == false)
        #expect(split.isDone)
    }

    @Test func aBatchAnsweredNotAtAllHasItsFirstMessageHandledAlone() {
        var split = BatchSplit(count: 3)
        #expect(split.step(unparked: 3) == .batch(0..<3))
        #expect(split.answered(0, of: 0..<3) == .init(final: 0..<0, alone: 0, decidedTogether: nil, severalMessages: true, cut: true))
        #expect(split.step(unparked: 2) == .batch(1..<3))
    }

    @Test func aMessageAloneIsABatchOfOneNeitherCountedAsABatchNorCut() {
        var split = BatchSplit(count: 1)
        #expect(split.step(unparked: 1) == .batch(0..<1))
        #expect(split.answered(1, of: 0..<1) == .init(final: 0..<1, alone: nil, decidedTogether: 1, severalMessages: false, cut: false))
        var unanswered = BatchSplit(count: 1)
        _ = unanswered.step(unparked: 1)
        #expect(unanswered.answered(0, of: 0..<1) == .init(final: 0..<0, alone: 0, decidedTogether: nil, severalMessages: false, cut: false))
        #expect(unanswered.isDone)
    }

    @Test func moreAnswersThanMessagesAreIgnored() {
        var split = BatchSplit(count: 2)
        _ = split.step(unparked: 2)
        #expect(split.answered(3, of: 0..<2) == .init(final: 0..<2, alone: nil, decidedTogether: 2, severalMessages: true, cut: false))
        #expect(split.isDone)
    }

    @Test func aMessageWhoseKeyHasAParkedOneGoesAloneAndTheNextRunStartsAfterIt() {
        var split = BatchSplit(count: 4)
        #expect(split.step(unparked: 2) == .batch(0..<2), "the run ends before the parked key")
        _ = split.answered(2, of: 0..<2)
        #expect(split.step(unparked: 0) == .alone(2))
        #expect(split.step(unparked: 1) == .batch(3..<4))
        _ = split.answered(1, of: 3..<4)
        #expect(split.isDone)
    }

    @Test func theRunEndsAtTheFirstKeyWithAParkedMessageAndKeylessMessagesNeverWait() {
        let a: OrderingKey = "a", b: OrderingKey = "b"
        #expect(BatchSplit.unparked([a, nil, a, b, a], parked: ["b"]) == 3)
        #expect(BatchSplit.unparked([nil, nil], parked: ["b"]) == 2)
        #expect(BatchSplit.unparked([b, a], parked: ["b"]) == 0)
        #expect(BatchSplit.unparked([a, b], parked: []) == 2)
        #expect(BatchSplit.unparked([OrderingKey?](), parked: ["a"]) == 0)
    }
}

import Testing
@testable import WorkerRuntime

/// What an in-flight mark says to the next holder of a partition, and how a batch is split around the suspects.
@Suite struct CrashEvidenceTests {
    @Test func noMarkOrAMarkWithNothingInHandIsNoCrash() {
        #expect(CrashEvidence(after: nil, resumingAt: 5) == CrashEvidence(suspect: nil, culprits: [], crashed: false))
        #expect(CrashEvidence(after: InFlightMark(handling: nil, suspect: nil), resumingAt: 5).crashed == false)
    }

    /// A holder that handled its batch and then stopped left its mark behind: the partition resumes after it.
    @Test func aMarkThePartitionHasPassedIsNoCrash() {
        let evidence = CrashEvidence(after: InFlightMark(handling: 10...19, suspect: nil), resumingAt: 20)
        #expect(evidence == CrashEvidence(suspect: nil, culprits: [], crashed: false))
    }

    @Test func aBatchInHandAtACrashMakesItsMessagesSuspectsWithoutACulprit() {
        // Resumed at the last committed offset, which may be before the batch.
        let evidence = CrashEvidence(after: InFlightMark(handling: 10...19, suspect: nil), resumingAt: 4)
        #expect(evidence == CrashEvidence(suspect: 10...19, culprits: [], crashed: true))
    }

    /// One message at a time through the suspects: one in hand alone at a second crash is still only a suspect (a kill
    /// says nothing about the message in hand). It becomes the culprit when the worker's trap record names it.
    @Test func aSuspectInHandAloneAtASecondCrashIsTheCulpritOnlyWhenItsTrapNamesIt() throws {
        let killed = InFlightMark(handling: 13...13, suspect: 10...19)
        #expect(CrashEvidence(after: killed, resumingAt: 13) == CrashEvidence(suspect: 13...19, culprits: [], crashed: true))
        let trapped = try #require(killed.confirmingTrap(at: 13))
        #expect(trapped == InFlightMark(handling: 13...13, suspect: 10...19, culprits: [13]))
        #expect(CrashEvidence(after: trapped, resumingAt: 13) == CrashEvidence(suspect: 13...19, culprits: [13], crashed: true))
    }

    /// A trap record confirms only what the mark says was in hand alone: a batch's trap, a stale record (the partition
    /// moved on), or one not a suspect names no culprit.
    @Test func aTrapRecordNamesACulpritOnlyWhereTheMarkHadItAloneAmongTheSuspects() {
        #expect(InFlightMark(handling: 10...19, suspect: nil).confirmingTrap(at: 12) == nil)
        #expect(InFlightMark(handling: 14...14, suspect: 10...19).confirmingTrap(at: 13) == nil)
        #expect(InFlightMark(handling: 7...7, suspect: nil).confirmingTrap(at: 7) == nil)
        #expect(InFlightMark(handling: nil, suspect: 10...19).confirmingTrap(at: 13) == nil)
    }

    /// A message that came alone (no traffic) and crashed once is a suspect, not yet a culprit: every message gets a
    /// second chance alone, with nothing else in hand in the process.
    @Test func aMessageAloneAtAFirstCrashIsOnlyASuspect() {
        let evidence = CrashEvidence(after: InFlightMark(handling: 7...7, suspect: nil), resumingAt: 7)
        #expect(evidence == CrashEvidence(suspect: 7...7, culprits: [], crashed: true))
        #expect(CrashEvidence(after: InFlightMark(handling: 7...7, suspect: 7...7), resumingAt: 7).culprits == [])
        #expect(InFlightMark(handling: 7...7, suspect: 7...7).confirmingTrap(at: 7)?.culprits == [7])
    }

    /// A graceful stop while going through the suspects clears what was in hand and keeps the suspects.
    @Test func suspectsLeftByAGracefulStopAreStillSuspectsButNoCrash() {
        let evidence = CrashEvidence(after: InFlightMark(handling: nil, suspect: 10...19), resumingAt: 14)
        #expect(evidence == CrashEvidence(suspect: 10...19, culprits: [], crashed: false))
        #expect(CrashEvidence(after: InFlightMark(handling: nil, suspect: 10...19), resumingAt: 20).suspect == nil)
    }

    /// A crash in a batch before the suspects (messages redelivered from the last commit): the batch joins the suspects.
    @Test func aCrashInABatchBeforeTheSuspectsWidensThem() {
        let evidence = CrashEvidence(after: InFlightMark(handling: 4...9, suspect: 10...19), resumingAt: 4)
        #expect(evidence == CrashEvidence(suspect: 4...19, culprits: [], crashed: true))
    }

    /// The holder after the second crash may first be handed only the messages before the culprit (a batch of its own):
    /// their mark keeps naming the culprit, so the next batch, or the next holder, still dead-letters it.
    @Test func aCulpritIsKeptInTheMarkWhileTheMessagesBeforeItAreHandled() {
        let second = CrashEvidence(after: InFlightMark(handling: 4...4, suspect: 4...8, culprits: [4]), resumingAt: 0)
        #expect(second == CrashEvidence(suspect: 4...8, culprits: [4], crashed: true))
        // The mark the messages 0...3 go under, as `StageRunner` writes it: the culprit is ahead of them.
        let prefixMark = InFlightMark(handling: 0...3, suspect: 4...8, culprits: [4])
        #expect(CrashEvidence(after: prefixMark, resumingAt: 4) == CrashEvidence(suspect: 4...8, culprits: [4], crashed: false))
        // Interrupted there (the mark cleared of what was in hand): the next holder dead-letters it too.
        #expect(CrashEvidence(after: InFlightMark(handling: nil, suspect: 4...8, culprits: [4]), resumingAt: 2).culprits == [4])
        // A crash among the messages before it leaves it the culprit.
        #expect(CrashEvidence(after: prefixMark, resumingAt: 0) == CrashEvidence(suspect: 0...8, culprits: [4], crashed: true))
        // Passed (its dead letter committed), it is settled.
        #expect(CrashEvidence(after: InFlightMark(handling: nil, suspect: 4...8, culprits: [4]), resumingAt: 5).culprits == [])
    }

    /// A culprit dead-lettered but not yet committed when its holder is killed comes again: the next holder resumes before
    /// it and dead-letters it again instead of handing it to the stage (to trap the worker once more), however far the
    /// suspects have moved; so do culprits of the same partition named before it. Within an assignment the holder keeps them
    /// all (its batches' first offsets are not where the partition was committed).
    @Test func culpritsAreKeptUntilThePartitionResumesAfterThem() {
        let mark = InFlightMark(handling: 40...40, suspect: 40...60, culprits: [33, 37])
        let resumed = CrashEvidence(after: mark, resumingAt: 30)
        #expect(resumed == CrashEvidence(suspect: 40...60, culprits: [33, 37], crashed: true))
        #expect(CrashSegments.split([32, 33, 34, 37, 40, 41], suspect: resumed.suspect, culprits: resumed.culprits)
                == [.batch(0..<1), .culprit(1), .batch(2..<3), .culprit(3), .alone(4), .alone(5)])
        #expect(CrashEvidence(after: mark, resumingAt: 35).culprits == [37], "committed past 33")
        #expect(CrashEvidence(after: mark, resumingAt: 41, resumed: false).culprits == [33, 37], "a later batch of the same assignment")
    }

    /// A mark keeps its culprits sorted, once each, and the latest few.
    @Test func aMarkKeepsItsCulpritsSortedOnceEachAndBounded() {
        #expect(InFlightMark(handling: nil, suspect: nil, culprits: [9, 3, 9, 5]).culprits == [3, 5, 9])
        let many = InFlightMark(handling: nil, suspect: nil, culprits: (0..<100).map(Int64.init))
        #expect(many.culprits == (68..<100).map(Int64.init))
        #expect(InFlightMark(handling: 12...12, suspect: 10...19, culprits: [4]).confirmingTrap(at: 12)?.culprits == [4, 12])
    }

    @Test func aBatchIsSplitIntoRunsAroundItsSuspectsEachSuspectAlone() {
        #expect(CrashSegments.split([1, 2, 3], suspect: nil) == [.batch(0..<3)])
        #expect(CrashSegments.split([], suspect: nil) == [])
        #expect(CrashSegments.split([4, 5, 6, 7, 8], suspect: 6...7) == [.batch(0..<2), .alone(2), .alone(3), .batch(4..<5)])
        #expect(CrashSegments.split([6, 7], suspect: 1...9) == [.alone(0), .alone(1)])
        // Offsets need not be consecutive (compacted topics, transaction markers).
        #expect(CrashSegments.split([2, 5, 9], suspect: 3...8) == [.batch(0..<1), .alone(1), .batch(2..<3)])
    }
}

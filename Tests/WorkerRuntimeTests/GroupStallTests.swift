import Testing
@testable import WorkerRuntime

/// What the watchdog remembers of a group and decides from it, on instants given by the test.
@Suite struct GroupStallTests {
    typealias Stall = GroupWatchdog<ContinuousClock>.Stall
    let start = ContinuousClock.now
    let bound = Duration.seconds(60)

    @Test func aMismatchIsTimedFromItsFirstFindingUntilTheMemberHoldsItsShare() {
        var stall = Stall(bound: bound)
        #expect(stall.holdsOtherSlice(at: start) == .zero)
        #expect(stall.holdsOtherSlice(at: start + .seconds(40)) == .seconds(40))
        stall.holdsShare()
        #expect(stall.holdsOtherSlice(at: start + .seconds(50)) == .zero, "timed anew")
    }

    @Test func aStallBeginsOnceRejoinsAtMostOncePerBoundAndEnds() {
        var stall = Stall(bound: bound)
        #expect(stall.found(.assigned, mayRejoin: true, at: start) == .init())
        #expect(stall.found(.stalled("r"), mayRejoin: true, at: start + .seconds(1)) == .init(stallBegins: true, rejoin: true))
        #expect(stall.status == .stalled("r"))
        #expect(stall.found(.stalled("r"), mayRejoin: true, at: start + .seconds(60)) == .init(), "still stalled, rejoined less than a bound ago")
        #expect(stall.found(.stalled("r"), mayRejoin: true, at: start + .seconds(61)) == .init(rejoin: true))
        #expect(stall.found(.assigned, mayRejoin: true, at: start + .seconds(62)) == .init(stallEnds: true))
        #expect(stall.found(.assigned, mayRejoin: true, at: start + .seconds(63)) == .init())
    }

    @Test func aRejoinRestartsTheMismatchTiming() {
        var stall = Stall(bound: bound)
        _ = stall.holdsOtherSlice(at: start)
        #expect(stall.found(.stalled("r"), mayRejoin: true, at: start + .seconds(60)).rejoin)
        #expect(stall.holdsOtherSlice(at: start + .seconds(70)) == .zero, "the new member is given its bound")
    }

    @Test func aStallFoundWithoutADescriptionIsOnlyReported() {
        var stall = Stall(bound: bound)
        #expect(stall.found(.stalled("r"), mayRejoin: false, at: start) == .init(stallBegins: true))
        #expect(stall.found(.stalled("r"), mayRejoin: true, at: start + .seconds(1)) == .init(rejoin: true), "the first rejoin is not held back")
    }

    @Test func anIdleMemberStaysIdleThroughTwoFailedDescriptionsInARow() {
        var stall = Stall(bound: bound)
        #expect(stall.describeFailed() == nil, "nothing found yet: not idle")
        _ = stall.found(.idle(members: 3, partitions: 2), mayRejoin: true, at: start)
        stall.described()
        #expect(stall.describeFailed() == .idle(members: 3, partitions: 2))
        #expect(stall.describeFailed() == .idle(members: 3, partitions: 2))
        #expect(stall.describeFailed() == nil, "the third in a row")
        stall.described()
        #expect(stall.describeFailed() == .idle(members: 3, partitions: 2), "counted anew after a description")
    }
}

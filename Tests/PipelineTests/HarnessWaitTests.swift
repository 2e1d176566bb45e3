import Foundation
import PipelineHarness
import Testing

/// The harness's waits (demo, bench, chaos): a run that stops moving ends with a reason, not at its timeout.
struct HarnessWaitTests {
    @Test func aWaitWithoutProgressEndsAtItsStallLimitNotItsTimeout() async throws {
        let started = ContinuousClock.now
        let error = await #expect(throws: HarnessError.self) {
            try await waitFor({ _ in }, "the purchases finished", timeout: 600, stalledAfter: 1) { "finished 0/1" }
        }
        #expect(error?.description.contains("no progress for 1 s waiting until the purchases finished (finished 0/1)") == true, "\(String(describing: error))")
        #expect(ContinuousClock.now - started < .seconds(60), "ended by the stall limit, long before the timeout")
    }

    @Test func progressKeepsAWaitGoingPastTheStallLimit() async throws {
        var polls = 0
        var said: [String] = []
        // Polled every half second: six polls take longer than the stall limit, each with new progress. The timeout is far
        // off: the suite's other tests may hold the machine long enough to delay a poll by seconds, which is not a stall.
        try await waitFor({ said.append($0) }, "six polls", timeout: 600, stalledAfter: 1) {
            polls += 1
            return polls < 6 ? "poll \(polls)" : nil
        }
        #expect(polls == 6)
        #expect(said.last == "✓ six polls")
    }
}

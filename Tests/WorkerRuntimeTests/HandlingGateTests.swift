import Synchronization
import Testing
import TestSupport
@testable import WorkerRuntime

/// A suspect is handled with nothing else in hand in the process; everything else is handled together.
@Suite struct HandlingGateTests {
    /// Records who is inside the gate, and lets a test hold a holder in until released.
    final class Inside: Sendable {
        let state = Mutex<(shared: Int, exclusive: Int, overlapped: Bool)>((0, 0, false))
        let order = Mutex<[String]>([])

        func enter(exclusive: Bool) {
            state.withLock { state in
                if exclusive { state.exclusive += 1 } else { state.shared += 1 }
                if state.exclusive > 1 || (state.exclusive == 1 && state.shared > 0) { state.overlapped = true }
            }
        }

        func leave(exclusive: Bool) {
            state.withLock { state in if exclusive { state.exclusive -= 1 } else { state.shared -= 1 } }
        }
    }

    /// Opened once by the test: a holder waits on it without blocking a thread.
    final class Latch: Sendable {
        private let state = Mutex<(open: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))
        func wait() async {
            await withCheckedContinuation { waiter in
                let open = state.withLock { state in
                    if !state.open { state.waiting.append(waiter) }
                    return state.open
                }
                if open { waiter.resume() }
            }
        }
        func open() {
            let waiting = state.withLock { state in
                state.open = true
                defer { state.waiting = [] }
                return state.waiting
            }
            waiting.forEach { $0.resume() }
        }
    }

    @Test func sharedHoldersGoTogetherAndAnExclusiveOneWaitsForThemAndHoldsNewOnesBack() async throws {
        let gate = HandlingGate()
        let inside = Inside()
        let release = Latch()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<2 {
                group.addTask {
                    await gate.shared {
                        inside.enter(exclusive: false)
                        inside.order.withLock { $0.append("shared \(index)") }
                        await release.wait()
                        inside.leave(exclusive: false)
                    }
                }
            }
            try await waitUntil("both shared holders are in") { inside.state.withLock { $0.shared } == 2 }
            group.addTask {
                await gate.exclusive {
                    inside.enter(exclusive: true)
                    inside.order.withLock { $0.append("exclusive") }
                    inside.leave(exclusive: true)
                }
            }
            // The exclusive one now waits: a shared holder arriving after it waits behind it.
            try await waitUntil("the exclusive holder waits") { gate.waiting.exclusive == 1 }
            group.addTask {
                await gate.shared {
                    inside.enter(exclusive: false)
                    inside.order.withLock { $0.append("late shared") }
                    inside.leave(exclusive: false)
                }
            }
            try await waitUntil("the late shared holder waits") { gate.waiting.shared == 1 }
            #expect(inside.order.withLock { $0 }.count == 2)
            release.open()
            try await group.waitForAll()
        }
        #expect(inside.order.withLock { $0 }.suffix(2) == ["exclusive", "late shared"])
        #expect(inside.state.withLock { $0.overlapped } == false)
    }
}

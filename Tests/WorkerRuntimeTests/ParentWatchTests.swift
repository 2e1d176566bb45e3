import Foundation
import Synchronization
import Testing
import TestSupport
import WorkerRuntime

@Suite(.timeLimit(.minutes(5)))
struct ParentWatchTests {
    /// The parent a watch sees, and how often it looked.
    final class Parent: Sendable {
        let state = Mutex((pid: pid_t(4242), looks: 0))
        func current() -> pid_t { state.withLock { $0.looks += 1; return $0.pid } }
        var looks: Int { state.withLock { $0.looks } }
        func end() { state.withLock { $0.pid = 1 } }
    }

    let logged = Locked<[String]>([])

    func watch(_ parent: Parent) -> ParentWatch<ContinuousClock> {
        ParentWatch(parent: 4242, interval: .milliseconds(10), clock: ContinuousClock(), logger: Logger(stage: "test", sink: { [logged] line in logged.withLock { $0.append(line) } }),
                    currentParent: { parent.current() })
    }

    @Test func endsWhenTheParentHasGoneAndNotBefore() async throws {
        let parent = Parent()
        let watch = watch(parent)
        let ended = Mutex(false)
        let running = Task { try await watch.run(); ended.withLock { $0 = true } }
        try await waitUntil("the watch looked three times") { parent.looks >= 3 }
        #expect(!ended.withLock { $0 }, "the parent is still there")
        #expect(logged.value.isEmpty)
        parent.end()
        try await running.value
        #expect(logged.value.count == 1)
        #expect(logged.value.first?.contains("the parent process ended") == true, "\(logged.value)")
        #expect(logged.value.first?.contains("4242") == true)
    }

    @Test func endsAtGracefulShutdownWithTheParentThere() async throws {
        let parent = Parent()
        let watch = watch(parent)
        let running = Task { try await watch.run() }
        try await waitUntil("the watch looked") { parent.looks >= 1 }
        watch.triggerGracefulShutdown()
        try await running.value
        #expect(logged.value.isEmpty, "a shutdown is not the parent's end")
    }

    @Test func isRequestedOnlyForThisProcesssParent() {
        let logger = Logger(stage: "test", sink: { [logged] line in logged.withLock { $0.append(line) } })
        let clock = ContinuousClock()
        #expect(ParentWatch.requested(by: [:], clock: clock, logger: logger) == nil)
        #expect(ParentWatch.requested(by: ["IAP_PARENT_PID": String(getppid())], clock: clock, logger: logger) != nil)
        // Inherited from further up: names a process that is not this one's parent.
        #expect(ParentWatch.requested(by: ["IAP_PARENT_PID": String(getpid())], clock: clock, logger: logger) == nil)
        #expect(ParentWatch.requested(by: ["IAP_PARENT_PID": "1"], clock: clock, logger: logger) == nil)
        #expect(ParentWatch.requested(by: ["IAP_PARENT_PID": "not a pid"], clock: clock, logger: logger) == nil)
    }
}

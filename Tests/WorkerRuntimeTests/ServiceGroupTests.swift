import Foundation
import Synchronization
import Testing
import WorkerRuntime

/// A service that runs until told to stop.
final class WaitingService: Service {
    private let stop = AsyncStream<Void>.makeStream()
    let stopped = Mutex(false)
    let failure: (any Error)?

    init(failure: (any Error)? = nil) { self.failure = failure }

    func run() async throws {
        if let failure { throw failure }
        for await _ in stop.stream { break }
        stopped.withLock { $0 = true }
    }

    func triggerGracefulShutdown() { stop.continuation.yield() }
}

@Suite(.serialized) struct ServiceGroupTests {
    @Test func sigtermShutsEveryServiceDownGracefully() async throws {
        // Ignored until the group installs its handler, so an early signal cannot kill the test process.
        signal(SIGUSR1, SIG_IGN)
        let services = [WaitingService(), WaitingService()]
        let group = ServiceGroup(services: services, gracefulShutdownSignals: [SIGUSR1])
        let running = Task { try await group.run() }
        // Re-raise until the group's handler is installed and reacts.
        while !running.isCancelled, services.contains(where: { !$0.stopped.withLock { $0 } }) {
            kill(getpid(), SIGUSR1)
            try await Task.sleep(for: .milliseconds(20))
        }
        try await running.value
        #expect(services.allSatisfy { $0.stopped.withLock { $0 } })
    }

    @Test func oneServiceFailingStopsTheOthersAndTheErrorSurfaces() async throws {
        struct Boom: Error {}
        let survivor = WaitingService()
        let group = ServiceGroup(services: [survivor, WaitingService(failure: Boom())], gracefulShutdownSignals: [])
        await #expect(throws: Boom.self) { try await group.run() }
        #expect(survivor.stopped.withLock { $0 })
    }
}

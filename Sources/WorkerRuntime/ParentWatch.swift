import Foundation
import Synchronization

/// Ends when the process that started this one has gone, so that a worker started by the harness or a test process
/// does not outlive it when that process is killed or crashes (a graceful shutdown of the supervisor stops its workers
/// itself; a SIGKILL or an abort cannot).
///
/// The kernel re-parents an orphan (to init or a subreaper): its parent process id changes, and that is what is
/// watched. Not `PR_SET_PDEATHSIG`: it fires when the *thread* that started the child ends, and the thread that called
/// `posix_spawn` may be one of libdispatch's, which end when idle. A `ServiceGroup` shuts its other services down when
/// one ends, so the worker then stops as on SIGTERM.
public final class ParentWatch<C: Clock>: Service where C.Duration == Duration {
    /// The environment variable a supervisor sets to its process id (`ChildProcess` does) to have a child end with it.
    public static var environmentVariable: String { "IAP_PARENT_PID" }

    private let parent: pid_t
    private let interval: Duration
    private let clock: C
    private let currentParent: @Sendable () -> pid_t
    private let logger: Logger
    private let stopping = Mutex(false)

    /// - Parameters:
    ///   - parent: the process whose end ends this one.
    ///   - currentParent: this process's parent now (`getppid`; tests substitute it).
    public init(parent: pid_t, interval: Duration = .milliseconds(500), clock: C, logger: Logger,
                currentParent: @escaping @Sendable () -> pid_t = { getppid() }) {
        self.parent = parent
        self.interval = interval
        self.clock = clock
        self.logger = logger
        self.currentParent = currentParent
    }

    /// The watch asked for by `environment`: nil unless it names this process's parent. A value inherited from further
    /// up (a shell started by a supervisor, which then started this process) names another process and is ignored.
    public static func requested(by environment: [String: String], clock: C, logger: Logger) -> ParentWatch? {
        guard let value = environment[environmentVariable], let parent = pid_t(value), parent > 1, parent == getppid() else { return nil }
        return ParentWatch(parent: parent, clock: clock, logger: logger)
    }

    /// Returns when the parent has gone (logged) or at graceful shutdown.
    public func run() async throws {
        while !stopping.withLock({ $0 }) {
            if currentParent() != parent {
                logger.warning("the parent process ended; stopping", ["parent": Int(parent)])
                return
            }
            try await clock.sleep(for: interval, unless: { stopping.withLock { $0 } })
        }
    }

    public func triggerGracefulShutdown() { stopping.withLock { $0 = true } }
}

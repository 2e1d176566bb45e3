import CSpawn
import Foundation
import Synchronization

/// A child process started with `posix_spawn`: the workers the harness runs, the commands it calls, the executables the
/// tests start.
///
/// Not Foundation's `Process`: on Linux its `run()` copies the whole 256-byte name of every `/proc/self/fd` entry
/// and reads past glibc's buffer (swift-corelibs-foundation PR 5472, not in Swift 6.3.1), which crashed the test
/// process now and then (AddressSanitizer: heap-buffer-overflow in `findMaximumOpenFromProcSelfFD`). The child gets
/// descriptors 0–2 as given (else `/dev/null`) and no other, and an empty signal mask, and `IAP_PARENT_PID` set to
/// this process's id: a worker then ends when this process does, even when it is killed (WorkerRuntime's `ParentWatch`).
public final class ChildProcess: Sendable {
    /// Names the process that started a child; the workers watch it (WorkerRuntime's `ParentWatch.environmentVariable`).
    public static let parentEnvironmentVariable = "IAP_PARENT_PID"

    public let processIdentifier: pid_t
    /// The raw `waitpid` status once the child ended.
    private let ended = Ended()
    private let exited = DispatchSemaphore(value: 0)

    /// - Parameters:
    ///   - environment: added to (and overriding) this process's environment and `IAP_PARENT_PID`.
    ///   - standardInput, standardOutput, standardError: descriptors the child gets as 0, 1 and 2; nil: `/dev/null`.
    public init(_ executable: String, _ arguments: [String], environment: [String: String] = [:], directory: String? = nil,
                standardInput: Int32? = nil, standardOutput: Int32? = nil, standardError: Int32? = nil) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (target, source) in [(Int32(0), standardInput), (1, standardOutput), (2, standardError)] {
            if let source {
                posix_spawn_file_actions_adddup2(&actions, source, target)
            } else {
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_RDWR, 0)
            }
        }
        posix_spawn_file_actions_addclosefrom_np(&actions, 3)
        if let directory { posix_spawn_file_actions_addchdir_np(&actions, directory) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // No signal blocked (a thread of the concurrency pool blocks some, e.g. SIGALRM); ignored ones stay ignored,
        // as with Foundation's Process.
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))

        let variables = ProcessInfo.processInfo.environment.merging([Self.parentEnvironmentVariable: String(getpid())]) { _, new in new }
            .merging(environment) { _, new in new }.map { "\($0.key)=\($0.value)" }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = variables.map { strdup($0) } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid = pid_t()
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EINVAL) }
        processIdentifier = pid
        let spawned = pid
        // Reaps the child (it is ours alone: waitpid on its pid) and records how it ended.
        let thread = Thread { [ended, exited] in
            var status: Int32 = 0
            while waitpid(spawned, &status, 0) < 0 && errno == EINTR {}
            ended.status.withLock { $0 = status }
            exited.signal()
        }
        thread.name = "child-\(pid)"
        thread.start()
    }

    public var isRunning: Bool { ended.status.withLock { $0 } == nil }

    /// The exit status, or the number of the signal that ended it (as Foundation's `Process` says); 0 while it runs.
    public var terminationStatus: Int32 {
        guard let status = ended.status.withLock({ $0 }) else { return 0 }
        let signal = status & 0x7F
        return signal == 0 ? (status >> 8) & 0xFF : signal
    }

    /// Blocks until the child ended.
    public func waitUntilExit() {
        exited.wait()
        exited.signal() // for any later waiter
    }

    public func signal(_ number: Int32) { if isRunning { kill(processIdentifier, number) } }

    /// SIGTERM.
    public func terminate() { signal(SIGTERM) }
}

/// The raw `waitpid` status once the child ended, shared with the thread that reaps it.
private final class Ended: Sendable {
    let status = Mutex<Int32?>(nil)
}

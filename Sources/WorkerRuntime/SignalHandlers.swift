import Foundation
import Synchronization

/// Runs Swift closures when the process receives a signal, through a self-pipe read on a thread of its own.
///
/// A C handler that only writes the signal number into a pipe (async-signal-safe), and a plain thread that reads it
/// and calls whoever is registered: signal handling stays out of libdispatch's event loop and needs no dispatch
/// source to be cancelled while signals may arrive.
/// A signal with nobody registered is swallowed (the handler stays installed once a signal was watched).
final class SignalHandlers: Sendable {
    static let shared = SignalHandlers()

    struct Registration: Hashable, Sendable { fileprivate let id: UInt64 }

    private let state = Mutex<(next: UInt64, handlers: [UInt64: (signals: Set<Int32>, run: @Sendable () -> Void)], installed: Set<Int32>)>(
        (0, [:], []))

    private init() {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { fatalError("pipe() failed: errno \(errno); a process without descriptors cannot run") }
        // Close-on-exec: child processes must not inherit the pipe.
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        _ = fcntl(ends[1], F_SETFL, fcntl(ends[1], F_GETFL) | O_NONBLOCK)
        signalPipeWriteEnd = ends[1]
        let readEnd = ends[0]
        let thread = Thread { [unowned self] in self.readSignals(from: readEnd) }
        thread.name = "signal-handlers"
        thread.start()
    }

    /// Calls `run` (on the signal thread) whenever one of `signals` arrives, until `remove` is called.
    func add(_ signals: [Int32], run: @escaping @Sendable () -> Void) -> Registration {
        state.withLock { state in
            state.next += 1
            state.handlers[state.next] = (Set(signals), run)
            for signalNumber in signals where !state.installed.contains(signalNumber) {
                var action = sigaction()
                action.__sigaction_handler.sa_handler = { signalNumber in
                    // Async-signal-safe: one write(2), errno kept for the interrupted code.
                    let savedErrno = errno
                    var byte = UInt8(truncatingIfNeeded: signalNumber)
                    _ = write(signalPipeWriteEnd, &byte, 1)
                    errno = savedErrno
                }
                action.sa_flags = SA_RESTART
                sigemptyset(&action.sa_mask)
                sigaction(signalNumber, &action, nil)
                state.installed.insert(signalNumber)
            }
            return Registration(id: state.next)
        }
    }

    func remove(_ registration: Registration) {
        _ = state.withLock { $0.handlers.removeValue(forKey: registration.id) }
    }

    private func readSignals(from readEnd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 64)
        while true {
            let count = read(readEnd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else {
                // Cannot happen while the write end is open; if it does, signals must not be swallowed from now on.
                let failure = errno
                FileHandle.standardError.write(Data("signal-handlers: reading the signal pipe failed (errno \(failure)); default signal actions restored\n".utf8))
                state.withLock { state in state.installed.forEach { _ = signal($0, SIG_DFL) } }
                return
            }
            for byte in buffer[0..<count] {
                let signalNumber = Int32(byte)
                let handlers = state.withLock { $0.handlers.values.filter { $0.signals.contains(signalNumber) }.map(\.run) }
                handlers.forEach { $0() }
            }
        }
    }
}

/// The pipe the C signal handler writes to; set once in `SignalHandlers.init`, before any handler is installed,
/// and never changed, so the handler's unsynchronised read is safe.
/// `@exclusivity(unchecked)`: no dynamic exclusivity bookkeeping in the handler, which must stay async-signal-safe.
@exclusivity(unchecked) nonisolated(unsafe) private var signalPipeWriteEnd: Int32 = -1

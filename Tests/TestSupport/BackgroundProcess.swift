import ChildProcesses
import Foundation

/// A child process (not one of this package's executables: see `ExecutableProcess`) whose output is collected;
/// killed by `stop()` or when released.
public final class BackgroundProcess: Sendable {
    private let child: ChildProcess
    private let collected = Locked("")
    /// Kept: its read end closes when it goes, and the child would then write into nothing.
    private let outputPipe: Pipe

    public init(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        try TestServices.allowChildProcess(executable)
        let pipe = Pipe()
        child = try ChildProcess(executable, arguments, environment: environment, standardOutput: pipe.fileHandleForWriting.fileDescriptor,
                                 standardError: pipe.fileHandleForWriting.fileDescriptor)
        try pipe.fileHandleForWriting.close()
        outputPipe = pipe
        let collected = self.collected
        ChildOutputReader.start(pipe) { chunk in collected.withLock { $0 += String(decoding: chunk, as: UTF8.self) } }
    }

    /// Standard output and error so far.
    public var output: String { collected.value }

    public var isRunning: Bool { child.isRunning }

    public func stop() { child.signal(SIGKILL) }

    /// Sends `signal` (SIGSTOP and SIGCONT to make it stop answering and resume, say).
    public func signal(_ signal: Int32) { child.signal(signal) }

    deinit { stop() }
}

/// What a server printed when it exited before it listened.
public struct ExitedBeforeListening: Error, CustomStringConvertible {
    public let description: String
    public init(_ output: String) { description = String(output.suffix(2_000)) }
}

/// Starts a server on ports `freePort()` chose, and again on fresh ones when it exited before it listened: a port
/// free when chosen can be taken (another test's listener or outgoing connection) before the server binds it.
/// - Parameter start: starts the server on the ports given and waits until it listens; throws
///   `ExitedBeforeListening` when it exited instead.
public func onFreshPorts<Server>(_ count: Int, attempts: Int = 3, _ start: ([Int]) async throws -> Server) async throws -> Server {
    for attempt in 1... {
        do {
            return try await start((0..<count).map { _ in try freePort() })
        } catch let error as ExitedBeforeListening where attempt < attempts {
            print("a server exited before it listened, trying other ports: \(error)")
        }
    }
    preconditionFailure("unreachable: the last attempt returns or throws")
}

/// Whether something on loopback accepts connections on `port`.
public func isListening(port: Int) -> Bool {
    let descriptor = rawConnect(port: port, sending: "")
    if descriptor >= 0 { close(descriptor) }
    return descriptor >= 0
}

/// A TCP port free on loopback now (bound, read, released).
public func freePort() throws -> Int {
    let socket = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(socket) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
    }
    guard bound else { throw POSIXError(.EADDRINUSE) }
    return Int(UInt16(bigEndian: address.sin_port))
}

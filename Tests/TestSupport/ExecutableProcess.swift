import ChildProcesses
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPClient
import Testing
import WorkerRuntime

/// A built executable of this package running as a child process, its standard error collected line by line
/// (the JSON log), stopped with SIGTERM (or killed) by the test.
public final class ExecutableProcess {
    public let process: ChildProcess
    private let name: String
    /// Kept: its read end closes when it goes, and the child would then write into nothing.
    private let errorPipe: Pipe
    private let errorLines = Locked<[String]>([])

    /// `.build/debug/<name>`.
    public static func binary(_ name: String) -> URL { TestServices.packageRoot.appendingPathComponent(".build/debug/\(name)") }

    /// Where the executable writes the ports it listens on (`IAP_HTTP_PORT_FILE`).
    private let portFile = FileManager.default.temporaryDirectory.appendingPathComponent("iap-ports-\(UUID().uuidString).json")

    public init(_ name: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        try TestServices.allowChildProcess(name)
        let pipe = Pipe()
        process = try ChildProcess(Self.binary(name).path, arguments, environment: ["IAP_HTTP_PORT_FILE": portFile.path].merging(environment) { _, given in given },
                                   standardError: pipe.fileHandleForWriting.fileDescriptor)
        try pipe.fileHandleForWriting.close()
        self.name = name
        errorPipe = pipe
        let lines = errorLines
        let pending = Locked(Data())
        ChildOutputReader.start(pipe) { chunk in
            let complete = pending.withLock { buffer -> [String] in
                buffer.append(chunk)
                var found: [String] = []
                while let newline = buffer.firstIndex(of: 10) {
                    found.append(String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self))
                    buffer = Data(buffer[(newline + 1)...])
                }
                return found
            }
            lines.withLock { $0.append(contentsOf: complete) }
        }
    }

    /// The log so far.
    public var log: [String] { errorLines.withLock { $0 } }

    /// Waits for a log line containing `text` and returns it.
    public func waitForLog(_ text: String, timeout: Duration = .seconds(60)) async throws -> String {
        var found: String?
        try await waitUntil("\(name) logs '\(text)'", timeout: timeout) {
            found = log.first { $0.contains(text) }
            return found != nil || !process.isRunning
        }
        guard let found else { throw ProcessExited(log: log, status: process.terminationStatus) }
        return found
    }

    /// The port of the HTTP endpoints, from the port file the executable writes once listening.
    public func httpPort() async throws -> Int { try await port("http") }

    /// The port of the operations endpoints (`--ops-port`), from the same file.
    public func operationsPort() async throws -> Int { try await port("operations") }

    private func port(_ name: String) async throws -> Int {
        var port: Int?
        try await waitUntil("\(self.name) writes its \(name) port to \(portFile.lastPathComponent)") {
            let ports = PortFile.read(portFile) // nil: not written yet
            port = ports?[name]
            return port != nil || ports != nil || !process.isRunning
        }
        guard let port else { throw ProcessExited(log: log, status: process.isRunning ? -1 : process.terminationStatus) }
        return port
    }

    /// SIGTERM, then waits for the exit; returns the status.
    @discardableResult
    public func terminate(timeout: Duration = .seconds(60)) async throws -> Int32 {
        process.terminate()
        try await waitUntil("the process exits", timeout: timeout) { !process.isRunning }
        return process.terminationStatus
    }

    deinit {
        process.signal(SIGKILL)
        try? FileManager.default.removeItem(at: portFile) // gone already when it never listened
    }

    public struct ProcessExited: Error, CustomStringConvertible {
        public let log: [String]
        public let status: Int32
        public var description: String { "process exited (\(status)); log:\n" + log.suffix(20).joined(separator: "\n") }
    }
}

extension ExecutableProcess {
    /// How a run to its end went: the exit status and the lines of standard output.
    public struct Outcome: Sendable {
        public let status: Int32
        public let lines: [String]
    }

    /// Runs the built executable `name` to its end, as an operator would: `input` on its standard input, its standard
    /// error into the test's. On a thread of its own (see `offPool`).
    public static func run(_ name: String, _ arguments: [String], input: Data = Data()) async throws -> Outcome {
        try await offPool { try runBlocking(name, arguments, input: input) }
    }

    private static func runBlocking(_ name: String, _ arguments: [String], input: Data) throws -> Outcome {
        try TestServices.allowChildProcess(name)
        let stdin = Pipe()
        let stdout = Pipe()
        let process = try ChildProcess(binary(name).path, arguments, standardInput: stdin.fileHandleForReading.fileDescriptor,
                                       standardOutput: stdout.fileHandleForWriting.fileDescriptor)
        try stdin.fileHandleForReading.close()
        try stdout.fileHandleForWriting.close()
        stdin.fileHandleForWriting.write(input)
        try stdin.fileHandleForWriting.close()
        let output = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Outcome(status: process.terminationStatus, lines: String(decoding: output, as: UTF8.self).split(separator: "\n").map(String.init))
    }
}

/// One HTTP exchange over a real connection.
public func httpRequest(_ url: String, method: String = "GET", body: Data? = nil, headers: [String: String] = [:]) async throws -> (status: Int, body: String) {
    // The product's own client (libcurl on a thread of its own), not URLSession, which drives libcurl through dispatch
    // sources on its sockets.
    let request = HTTPClient.Request(method: method, url: url, headers: headers.map { (name: $0.key, value: $0.value) }, body: body.map(Array.init))
    switch await HTTPClient(timeout: .seconds(30), maxConnections: 1).send(request) {
    case .success(let response): return (response.status, String(decoding: response.body, as: UTF8.self))
    case .failure(let failure): throw URLError(.cannotConnectToHost, userInfo: [NSLocalizedDescriptionKey: failure.description])
    }
}

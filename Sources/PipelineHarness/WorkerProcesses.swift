import ChildProcesses
import Foundation
import WorkerRuntime

/// The worker executables as child processes, found next to the running executable (`iap-harness`), each with its
/// log file and the file it writes its ports to (`IAP_HTTP_PORT_FILE`) in `directory`.
public final class WorkerProcesses: @unchecked Sendable {
    // @unchecked: `processes` is only touched from the demo's own task, one call at a time.
    private let directory: URL
    private let environment: [String: String]
    private let binaries = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
    /// Each running worker: its executable, which replica it is (1: the one `start` began; 2… joined later), the process.
    private var processes: [(name: String, replica: Int, process: ChildProcess)] = []
    private var replicasStarted: [String: Int] = [:]
    /// Workers whose first replica left for good (`leave`): not brought back by `killAndRestart`.
    private var firstReplicaLeft: Set<String> = []
    /// Replicas told to leave (`leave`), as "name#replica": not brought back by `restartExited`.
    private var left: Set<String> = []

    public init(directory: URL, environment: [String: String]) throws {
        self.directory = directory
        self.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
    }

    /// The process id of the running `name` (its first replica).
    public func pid(of name: String) -> Int32? {
        processes.first { $0.name == name && $0.replica == 1 && $0.process.isRunning }?.process.processIdentifier
    }

    /// Where replica `replica` of `name` writes its log (standard output and error).
    public func logFile(of name: String, replica: Int = 1) -> URL {
        directory.appendingPathComponent(replica == 1 ? "\(name).log" : "\(name)-\(replica).log")
    }

    /// Where replica `replica` of `name` writes the ports it listens on (`IAP_HTTP_PORT_FILE`).
    public func portFile(of name: String, replica: Int = 1) -> URL {
        directory.appendingPathComponent(replica == 1 ? "\(name).ports.json" : "\(name)-\(replica).ports.json")
    }

    /// The HTTP port of replica `replica` of `name` (or of its operations endpoints, `"operations"`), once it listens.
    public func port(of name: String, replica: Int = 1, endpoints: String = "http") async throws -> Int {
        let file = portFile(of: name, replica: replica)
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if let ports = PortFile.read(file) { // nil: not written yet
                guard let port = ports[endpoints] else { throw HarnessError("\(file.lastPathComponent) names no \(endpoints) port") }
                return port
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw HarnessError("\(name) did not write \(file.lastPathComponent) within 60 s (its log: \(logFile(of: name, replica: replica).path))")
    }

    /// The replicas of `name` running now.
    public func replicas(of name: String) -> [Int] { processes.filter { $0.name == name && $0.process.isRunning }.map(\.replica) }

    /// Starts replica 1 of `name` (again, after a kill).
    public func start(_ name: String, arguments: [String] = []) throws { try start(name, replica: 1, arguments: arguments) }

    /// Starts one more replica of `name`, which joins the running ones' consumer groups; returns its number.
    public func join(_ name: String) throws -> Int {
        let replica = max(2, (replicasStarted[name] ?? 1) + 1)
        try start(name, replica: replica, arguments: [])
        return replica
    }

    /// Stops replica `replica` of `name`: SIGTERM (it leaves its groups gracefully; not awaited) or SIGKILL.
    public func leave(_ name: String, replica: Int, signal: Int32) {
        if replica == 1 { firstReplicaLeft.insert(name) }
        left.insert("\(name)#\(replica)")
        for entry in processes where entry.name == name && entry.replica == replica && entry.process.isRunning {
            entry.process.signal(signal)
        }
    }

    private func start(_ name: String, replica: Int, arguments: [String]) throws {
        replicasStarted[name] = max(replicasStarted[name] ?? 0, replica)
        let executable = binaries.appendingPathComponent(name)
        guard FileManager.default.isExecutableFile(atPath: executable.path) else { throw HarnessError("\(name) not found next to iap-harness (\(executable.path)); build all products") }
        // IAP_WORKER_WRAPPER (e.g. "valgrind --leak-check=full --log-file=/tmp/vg.%p"): run each worker under it.
        var command = (executable.path, arguments)
        if let wrapper = environment["IAP_WORKER_WRAPPER"]?.split(separator: " ").map(String.init), !wrapper.isEmpty {
            command = ("/usr/bin/env", wrapper + [executable.path] + arguments) // env finds the wrapper on PATH
        }
        // A restarted worker writes its new port; the file of the one before it goes first.
        let ports = portFile(of: name, replica: replica)
        try? FileManager.default.removeItem(at: ports) // absent at the first start
        // Appended to: a restarted worker's log follows its predecessor's.
        let log = open(logFile(of: name, replica: replica).path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard log >= 0 else { throw HarnessError("cannot open \(logFile(of: name, replica: replica).path): errno \(errno)") }
        defer { close(log) } // the child has its own copy
        let process = try ChildProcess(command.0, command.1, environment: environment.merging(["IAP_HTTP_PORT_FILE": ports.path]) { _, file in file },
                                       standardOutput: log, standardError: log)
        processes.append((name, replica, process))
    }

    /// Kills replica 1 of a worker with SIGKILL (no shutdown, no commit, as a crash or an OOM kill would) and starts a new one;
    /// nothing once that replica left.
    public func killAndRestart(_ name: String) throws {
        guard !firstReplicaLeft.contains(name) else { return }
        for (running, replica, process) in processes where running == name && replica == 1 && process.isRunning {
            process.signal(SIGKILL)
            process.waitUntilExit()
        }
        processes.removeAll { !$0.process.isRunning }
        try start(name)
    }

    /// Starts again each replica of `names` that ended by itself (a trap, not a kill or a leave of the harness's), as
    /// Kubernetes restarts a container; returns each with the status or signal it ended by.
    public func restartExited(_ names: [String]) throws -> [(name: String, replica: Int, status: Int32)] {
        let exited = processes.filter { names.contains($0.name) && !$0.process.isRunning && !left.contains("\($0.name)#\($0.replica)") }
        processes.removeAll { entry in exited.contains { $0.process === entry.process } }
        for entry in exited { try start(entry.name, replica: entry.replica, arguments: []) }
        return exited.map { ($0.name, $0.replica, $0.process.terminationStatus) }
    }

    /// SIGTERM, a bounded wait for the graceful shutdown, then SIGKILL.
    public func stopAll() {
        for (_, _, process) in processes where process.isRunning { process.terminate() }
        // A wrapped worker (valgrind) takes longer to stop and report.
        let deadline = Date().addingTimeInterval(environment["IAP_WORKER_WRAPPER"] == nil ? 40 : 300)
        for (_, _, process) in processes {
            while process.isRunning && Date() < deadline { usleep(50_000) }
            process.signal(SIGKILL)
        }
        processes.removeAll()
    }
}


import ChildProcesses
import Foundation
import Testing
import TestSupport
import WorkerRuntime

/// A worker started by a supervisor ends with it, also when the supervisor is killed: the harness or a test process
/// that crashes leaves no workers running.
@Suite(.timeLimit(.minutes(5)))
struct WorkerLifetimeTests {
    @Test func childProcessesAreToldWhoStartedThem() throws {
        #expect(ChildProcess.parentEnvironmentVariable == ParentWatch<ContinuousClock>.environmentVariable)
        let result = try runCommand("/bin/sh", ["-c", "printf %s \"$IAP_PARENT_PID\""])
        #expect(result.output == String(getpid()))
    }

    @Test func aWorkerWhoseParentIsKilledStops() async throws {
        // A shell stands in for the harness: it starts `iap-ingest` naming itself as the parent, then becomes `sleep`
        // (same process) and is killed. Port 1: no broker is needed to start, and none is reached.
        let ingest = ExecutableProcess.binary("iap-ingest").path
        let script = "IAP_PARENT_PID=$$ \"$0\" --brokers 127.0.0.1:1 --http-port 0 --http-host 127.0.0.1 & echo \"worker=$!\"; exec sleep 600"
        let supervisor = try BackgroundProcess("/bin/sh", ["-c", script, ingest])
        var worker: pid_t?
        try await waitUntil("the worker has started") {
            worker = supervisor.output.split(separator: "\n").lazy.compactMap { $0.hasPrefix("worker=") ? pid_t($0.dropFirst(7)) : nil }.first
            return worker != nil && supervisor.output.contains("\"msg\":\"started\"")
        }
        guard let worker else { return }
        defer { kill(worker, SIGKILL) }
        #expect(Self.isRunning(worker))

        supervisor.stop() // SIGKILL: no chance to stop its children
        try await waitUntil("the worker stops after its parent was killed", timeout: .seconds(30)) { !Self.isRunning(worker) }
        #expect(supervisor.output.contains("the parent process ended"), "\(supervisor.output.suffix(2000))")
        #expect(supervisor.output.contains("\"msg\":\"stopped\""), "a graceful stop")
    }

    /// Alive and not a zombie (an orphan is reaped by whoever adopted it, perhaps later).
    static func isRunning(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let afterName = stat.range(of: ") ", options: .backwards) else { return false }
        return !stat[afterName.upperBound...].hasPrefix("Z")
    }
}

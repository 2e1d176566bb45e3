import CommandLineOptions
import Foundation
import JSON
import PipelineHarness
import Synchronization

/// `iap-harness bench ingest-memory [--requests N] [--body NAME]… [--brokers HOST:PORT] [--publish-timeout S] [--json]`: the resident memory
/// of an `iap-ingest` process (its own, from /proc) while requests with the bodies that cost it most are with it at
/// once, and after they were answered.
///
/// Each kind of body runs against an ingest of its own, started fresh with the settings the deployments give it (its
/// defaults, with an operations port): its resident memory once warmed up (a few small notifications answered), its
/// peak (VmHWM) over `N` concurrent requests of that body (by default 256 of the oversized notification, 250 of the
/// others), each sent in two writes (all but its last byte, then that byte 2 s after every first write was done: slow
/// clients that hold what the ingest takes in), and its resident memory once that stopped
/// falling after the answers. Meanwhile `/healthz` is asked on the operations port every 100 ms, with the kubelet's 1 s
/// to answer. Without `--brokers` the ingest's broker is an address where nothing listens, so that every request
/// waits out `--publish-timeout` with what it holds: a broker outage during a flood, the longest any request stays.
enum BenchIngestMemoryCommand {
    /// A body the ingest takes in, of a kind that costs it the most memory for its size.
    struct Body {
        let name: String
        let path: String
        let bytes: [UInt8]
        /// How many are sent at once unless `--requests` says.
        var requests = 250
    }

    /// The largest notification body the ingest parses (a 64 KiB `signedPayload` and 1 KiB around it), the default
    /// `--max-body-bytes` of a submission.
    static let notificationBodyBytes = 65 * 1024
    static let submissionBodyBytes = 256 * 1024

    /// The kinds of body: the most JSON values per byte beside a notification's payload, the largest payload a
    /// notification may carry (it is published); in a submission (no client secret set) the most values per byte, and the
    /// largest receipt (published).
    static let bodies: [Body] = [
        Body(name: "notification-values", path: "/v1/appstore/notifications",
             bytes: nestedArrays(prefix: #"{"signedPayload":"e30.e30.c2ln","extra":"#, total: notificationBodyBytes)),
        Body(name: "notification-payload", path: "/v1/appstore/notifications", bytes: largestPayload()),
        // Larger than any notification the verifier accepts, as large as --max-body-bytes: refused on its Content-Length.
        Body(name: "notification-oversized", path: "/v1/appstore/notifications", bytes: largestPayload(bytes: submissionBodyBytes - 20),
             requests: 256),
        Body(name: "submission-values", path: "/v1/purchases",
             bytes: nestedArrays(prefix: #"{"store":"appstore","kind":"signedTransaction","userId":"u-1","extra":"#, total: submissionBodyBytes)),
        Body(name: "submission-receipt", path: "/v1/purchases", bytes: largestReceipt()),
    ]

    /// `prefix`, then `[[0],[0],…]` and `}`, `total` bytes in all: an array of one-element arrays, each of which is a
    /// value of its own (two, with its element) in 4 bytes.
    static func nestedArrays(prefix: String, total: Int) -> [UInt8] {
        let count = (total - prefix.utf8.count - 3) / 4 // "[" + count × "[0]," less the last "," + "]" + "}"
        var bytes = Array(prefix.utf8) + [UInt8(ascii: "[")]
        bytes.reserveCapacity(total)
        for index in 0..<count { bytes += Array((index == 0 ? "[0]" : ",[0]").utf8) }
        bytes += Array("]}".utf8)
        bytes += [UInt8](repeating: UInt8(ascii: " "), count: total - bytes.count) // whitespace up to the size
        return bytes
    }

    /// `{"signedPayload":"…"}` (20 bytes and the payload) with a compact-JWS-shaped payload of `bytes` (64 KiB: the most
    /// the ingest accepts).
    static func largestPayload(bytes: Int = 64 * 1024) -> [UInt8] {
        let payload = "e30." + String(repeating: "A", count: bytes - 9) + ".c2ln"
        return Array(#"{"signedPayload":""#.utf8) + Array(payload.utf8) + Array(#""}"#.utf8)
    }

    /// An App Store receipt submission of `submissionBodyBytes`, nearly all of it the receipt.
    static func largestReceipt() -> [UInt8] {
        let prefix = #"{"store":"appstore","kind":"appReceipt","userId":"u-1","receipt":""#
        let suffix = #""}"#
        return Array(prefix.utf8) + [UInt8](repeating: UInt8(ascii: "A"), count: submissionBodyBytes - prefix.utf8.count - suffix.utf8.count) + Array(suffix.utf8)
    }

    /// One kind of body's figures.
    struct Measurement {
        let body: Body
        let outcome: ConcurrentRequests.Outcome
        let baselineMiB: Double
        let peakMiB: Double
        let afterMiB: Double
        let lastFallSeconds: Double
        /// `/healthz` on the operations port during the requests: answered 200 in time, and not.
        let healthAnswered: Int
        let healthFailed: Int
    }

    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--requests", "--brokers", "--publish-timeout", "--body"], flags: ["--json"])
        let requests = try options.int("--requests")
        let publishTimeout = try options.int("--publish-timeout") ?? 10
        guard requests ?? 1 >= 1, publishTimeout >= 1 else { throw UsageError("bench ingest-memory: --requests and --publish-timeout must be positive") }
        let names = options.values["--body"] ?? bodies.map(\.name)
        let chosen = try names.map { name in
            guard let body = bodies.first(where: { $0.name == name }) else {
                throw UsageError("--body is one of \(bodies.map(\.name).joined(separator: ", "))")
            }
            return body
        }
        let json = options.flags.contains("--json")
        let say: (String) -> Void = { line in FileHandle.standardError.write(Data((line + "\n").utf8)) }
        let brokers = options.string("--brokers") ?? "127.0.0.1:1"
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("iap-ingest-memory-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }

        var measurements: [Measurement] = []
        for body in chosen {
            let measurement = try await measure(body, requests: requests ?? body.requests, brokers: brokers, publishTimeout: publishTimeout, work: work, say: say)
            measurements.append(measurement)
            if !json { print(line(measurement)) }
        }
        if json {
            print(JSONValue.object([
                "brokers": .string(brokers), "publishTimeoutSeconds": .integer(Int64(publishTimeout)),
                "bodies": .array(measurements.map(report)),
            ]).serializedText)
        }
        return 0
    }

    private static func measure(_ body: Body, requests: Int, brokers: String, publishTimeout: Int, work: URL,
                                say: (String) -> Void) async throws -> Measurement {
        let workers = try WorkerProcesses(directory: work.appendingPathComponent(body.name, isDirectory: true).creatingDirectory(), environment: [:])
        defer { workers.stopAll() }
        try workers.start("iap-ingest", arguments: ["--brokers", brokers, "--http-port", "0", "--http-host", "127.0.0.1", "--ops-port", "0",
                                                    "--publish-timeout", String(publishTimeout), "--log-level", "error"])
        let port = try await workers.port(of: "iap-ingest")
        let operationsPort = try await workers.port(of: "iap-ingest", endpoints: "operations")
        guard let pid = workers.pid(of: "iap-ingest") else { throw HarnessError("iap-ingest exited at start (log: \(workers.logFile(of: "iap-ingest").path))") }
        let answerWithin = Duration.seconds(publishTimeout + 60)
        // Warmed up: a few small notifications through the whole path (parse, event, producer) before the baseline.
        let small = ConcurrentRequests.post("/v1/appstore/notifications", body: Array(#"{"signedPayload":"e30.e30.c2ln"}"#.utf8))
        _ = await ConcurrentRequests.send(small, count: 4, port: port, timeout: answerWithin)
        guard let baseline = ProcessAccounting.residentMiB(pid) else { throw HarnessError("iap-ingest exited while warming up") }
        say("\(body.name): \(requests) × \(body.bytes.count) bytes to \(body.path), resident \(String(format: "%.1f", baseline)) MiB before")

        let flooding = StopFlag()
        async let health = probeHealth(port: operationsPort, until: flooding)
        let outcome = await ConcurrentRequests.send(ConcurrentRequests.post(body.path, body: body.bytes), count: requests, port: port,
                                                    timeout: answerWithin, holdLastByte: .seconds(2))
        flooding.stop()
        let (healthAnswered, healthFailed) = await health
        guard let peak = ProcessAccounting.peakRSSMiB(pid) else {
            throw HarnessError("iap-ingest is gone after the requests (out of memory?); statuses \(outcome.statuses)")
        }
        // After: resident memory once it has stopped falling for 3 s (or after 60 s).
        let settleStart = ContinuousClock.now
        var after = ProcessAccounting.residentMiB(pid) ?? peak
        var lastFall = ContinuousClock.now
        while ContinuousClock.now - lastFall < .seconds(3) && ContinuousClock.now - settleStart < .seconds(60) {
            try await Task.sleep(for: .milliseconds(100))
            guard let now = ProcessAccounting.residentMiB(pid) else { throw HarnessError("iap-ingest exited after the requests") }
            if now < after - 0.1 { lastFall = ContinuousClock.now }
            after = min(after, now)
        }
        let settled = (lastFall - settleStart) / .seconds(1) // when it last fell
        return Measurement(body: body, outcome: outcome, baselineMiB: baseline, peakMiB: peak, afterMiB: after, lastFallSeconds: settled,
                           healthAnswered: healthAnswered, healthFailed: healthFailed)
    }

    /// Set once the requests were answered.
    final class StopFlag: Sendable {
        private let stopped = Atomic<Bool>(false)
        func stop() { stopped.store(true, ordering: .relaxed) }
        var isStopped: Bool { stopped.load(ordering: .relaxed) }
    }

    /// `GET /healthz` on `port` every 100 ms, each with the kubelet's default 1 s to answer, on a thread of its own,
    /// until `flag` is set (or for 5 minutes at most): how many were answered 200 in time, and how many not.
    static func probeHealth(port: Int, until flag: StopFlag) async -> (answered: Int, failed: Int) {
        await withCheckedContinuation { continuation in
            let thread = Thread {
                let request = Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8)
                var answered = 0, failed = 0
                let deadline = ContinuousClock.now + .seconds(300)
                while !flag.isStopped && ContinuousClock.now < deadline {
                    let started = ContinuousClock.now
                    let exchange = ConcurrentRequests.exchange(request, port: port, timeout: .seconds(1))
                    if exchange.status == 200 && exchange.answered - started <= .seconds(1) { answered += 1 } else { failed += 1 }
                    usleep(100_000)
                }
                continuation.resume(returning: (answered, failed))
            }
            thread.start()
        }
    }

    private static func line(_ measurement: Measurement) -> String {
        let statuses = measurement.outcome.statuses.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")
        return String(format: "%@ %d × %d bytes%@: resident %.1f MiB before, peak %.1f MiB, %.1f MiB after (its last fall %.1f s after the answers); answers %@ (%d with Retry-After); /healthz meanwhile %d answered, %d not",
                      measurement.body.name, measurement.outcome.exchanges.count, measurement.body.bytes.count,
                      measurement.outcome.allInFlightAtOnce ? ", all at once" : " (not all at once)",
                      measurement.baselineMiB, measurement.peakMiB, measurement.afterMiB, measurement.lastFallSeconds, statuses,
                      measurement.outcome.exchanges.count { $0.retryAfter }, measurement.healthAnswered, measurement.healthFailed)
    }

    private static func report(_ measurement: Measurement) -> JSONValue {
        func mib(_ value: Double) -> JSONValue { .number((value * 10).rounded() / 10) }
        return .object([
            "body": .string(measurement.body.name), "path": .string(measurement.body.path), "bytes": .integer(Int64(measurement.body.bytes.count)),
            "requests": .integer(Int64(measurement.outcome.exchanges.count)),
            "retryAfter": .integer(Int64(measurement.outcome.exchanges.count { $0.retryAfter })),
            "healthzAnswered": .integer(Int64(measurement.healthAnswered)), "healthzFailed": .integer(Int64(measurement.healthFailed)),
            "allInFlightAtOnce": .bool(measurement.outcome.allInFlightAtOnce),
            "statuses": .object(Dictionary(uniqueKeysWithValues: measurement.outcome.statuses.map { (String($0.key), JSONValue.integer(Int64($0.value))) })),
            "baselineMiB": mib(measurement.baselineMiB), "peakMiB": mib(measurement.peakMiB), "afterMiB": mib(measurement.afterMiB),
            "lastFallSeconds": mib(measurement.lastFallSeconds),
        ])
    }
}

private extension URL {
    /// This directory, created if absent.
    func creatingDirectory() throws -> URL {
        try FileManager.default.createDirectory(at: self, withIntermediateDirectories: true)
        return self
    }
}

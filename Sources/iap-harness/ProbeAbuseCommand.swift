import CommandLineOptions
import Foundation
import PipelineHarness
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// `iap-harness probe-abuse`: slow clients against an operations port while it is probed as Kubernetes probes it.
/// `--connections` connections (40 unless told) each send the start of a request head and then one more byte every
/// `--trickle-ms` (0: nothing more), and each is opened again `--reopen-ms` (100) after the server closed it; meanwhile `/healthz`
/// and `/readyz` are asked every 250 ms with the kubelet's default timeout of 1 s. A probe fails when it gets no answer
/// within that second, or the server's `503 busy` (no slot for it) instead of its handler's answer; any other answer
/// of `/readyz` counts as answered (not ready is an answer). Without `--port` it starts an `iap-ingest` (next to this
/// executable, with an unreachable broker) with `--ops-port 0` and uses that port. Exit status 1 when a probe failed.
enum ProbeAbuseCommand {
    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--port", "--connections", "--trickle-ms", "--reopen-ms", "--seconds"], flags: ["--json"])
        let connections = try options.int("--connections") ?? 40
        let trickle = try options.int("--trickle-ms") ?? 1000
        let reopen = try options.int("--reopen-ms") ?? 100
        let seconds = try options.int("--seconds") ?? 30
        guard connections >= 1, connections <= 10_000, trickle >= 0, reopen >= 0, seconds >= 1 else {
            throw UsageError("--connections 1–10000, --trickle-ms and --reopen-ms ≥ 0, --seconds ≥ 1")
        }
        var workers: WorkerProcesses?
        var directory: URL?
        defer {
            workers?.stopAll()
            if let directory { try? FileManager.default.removeItem(at: directory) }
        }
        let port: Int
        if let given = try options.int("--port") {
            guard (1...65535).contains(given) else { throw UsageError("--port must be 1–65535") }
            port = given
        } else {
            let work = FileManager.default.temporaryDirectory.appendingPathComponent("iap-probe-abuse-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
            directory = work
            let started = try WorkerProcesses(directory: work, environment: ["IAP_LOG_LEVEL": "warning"])
            workers = started
            try started.start("iap-ingest", arguments: ["--brokers", "127.0.0.1:1", "--http-port", "0", "--http-host", "127.0.0.1", "--ops-port", "0"])
            port = try await started.port(of: "iap-ingest", endpoints: "operations")
        }
        let report = await offThePool {
            Self.abuse(port: port, connections: connections, trickle: .milliseconds(trickle), reopen: .milliseconds(reopen), for: .seconds(seconds))
        }
        if options.flags.contains("--json") {
            let paths = report.probes.map { #""\#($0.path.dropFirst())":\#($0.json)"# }.joined(separator: ",")
            print(#"{"port":\#(port),"connections":\#(connections),"trickleMilliseconds":\#(trickle),"reopenMilliseconds":\#(reopen),"seconds":\#(seconds),"reopened":\#(report.reopened),\#(paths)}"#)
        } else {
            let how = trickle == 0 ? "the start of a request head, then nothing" : "a byte every \(trickle) ms"
            print("\(connections) slow connections (\(how)) to 127.0.0.1:\(port) for \(seconds) s; opened again \(report.reopened) times, \(reopen) ms after the server closed them")
            for probe in report.probes { print(probe.line) }
        }
        return report.probes.allSatisfy { $0.failed == 0 } ? 0 : 1
    }

    /// What the probes of one path got.
    struct Tally: Sendable {
        let path: String
        var probes = 0
        var busy = 0
        var unanswered = 0
        var failed: Int { busy + unanswered }
        /// The longest time from a failed probe's start to the next answered probe's (or the run's end).
        var longestFailing: Duration = .zero
        var failingSince: ContinuousClock.Instant?

        mutating func record(_ outcome: Outcome, at start: ContinuousClock.Instant) {
            probes += 1
            switch outcome {
            case .answered:
                close(at: start)
                return
            case .busy: busy += 1
            case .unanswered: unanswered += 1
            }
            if failingSince == nil { failingSince = start }
        }

        mutating func close(at instant: ContinuousClock.Instant) {
            if let since = failingSince { longestFailing = max(longestFailing, instant - since) }
            failingSince = nil
        }

        var longestSeconds: String {
            let (seconds, attoseconds) = longestFailing.components
            return String(format: "%.1f", Double(seconds) + Double(attoseconds) / 1e18)
        }
        var line: String {
            "\(path): \(probes) probes, \(failed) failed (\(busy) answered 503 busy, \(unanswered) not answered within 1 s); longest failing stretch \(longestSeconds) s"
        }
        var json: String {
            #"{"probes":\#(probes),"failed":\#(failed),"busy":\#(busy),"unanswered":\#(unanswered),"longestFailingSeconds":\#(longestSeconds)}"#
        }
    }

    enum Outcome { case answered, busy, unanswered }

    final class Count: Sendable {
        let value = Mutex(0)
    }

    struct Report: Sendable {
        let probes: [Tally]
        let reopened: Int
    }

    /// Holds the slow connections on one thread and probes on this one, for `duration`.
    static func abuse(port: Int, connections: Int, trickle: Duration, reopen: Duration, for duration: Duration) -> Report {
        let end = ContinuousClock.now + duration
        let reopened = Count()
        let held = DispatchSemaphore(value: 0)
        let holder = Thread {
            reopened.value.withLock { $0 = hold(port: port, connections: connections, trickle: trickle, reopen: reopen, until: end) }
            held.signal()
        }
        holder.start()
        var tallies = [Tally(path: "/healthz"), Tally(path: "/readyz")]
        usleep(500_000) // the slow connections take their slots first
        while ContinuousClock.now < end {
            let round = ContinuousClock.now
            for index in tallies.indices {
                let start = ContinuousClock.now
                tallies[index].record(probe(port: port, path: tallies[index].path), at: start)
            }
            let next = round + .milliseconds(250)
            if next > ContinuousClock.now { Thread.sleep(until: Date() + (next - ContinuousClock.now).timeInterval) }
        }
        for index in tallies.indices { tallies[index].close(at: ContinuousClock.now) }
        held.wait()
        return Report(probes: tallies, reopened: reopened.value.withLock { $0 })
    }

    /// Keeps `connections` slow connections open until `end`: each sends the start of a head, then a byte of a header
    /// value every `trickle`; one the server closed (or answered) is opened again `reopen` later. Returns how many times
    /// one was.
    static func hold(port: Int, connections: Int, trickle: Duration, reopen: Duration, until end: ContinuousClock.Instant) -> Int {
        var descriptors = [Int32](repeating: -1, count: connections)
        var closedAt = [ContinuousClock.Instant?](repeating: nil, count: connections)
        var opened = 0
        var nextTrickle = ContinuousClock.now + trickle
        while ContinuousClock.now < end {
            for index in descriptors.indices where descriptors[index] < 0 && closedAt[index].map({ ContinuousClock.now - $0 >= reopen }) ?? true {
                let descriptor = connect(port: port, timeout: .seconds(1))
                guard descriptor >= 0 else { continue }
                opened += 1
                if !send(descriptor, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ") { close(descriptor); continue }
                descriptors[index] = descriptor
            }
            var polled = descriptors.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            _ = poll(&polled, nfds_t(polled.count), 50)
            for (index, entry) in polled.enumerated() where entry.fd >= 0 && entry.revents != 0 {
                close(entry.fd) // answered or closed by the server: opened again after `reopen`
                descriptors[index] = -1
                closedAt[index] = ContinuousClock.now
            }
            if trickle > .zero && ContinuousClock.now >= nextTrickle {
                nextTrickle = ContinuousClock.now + trickle
                for index in descriptors.indices where descriptors[index] >= 0 && !send(descriptors[index], "a") {
                    close(descriptors[index])
                    descriptors[index] = -1
                    closedAt[index] = ContinuousClock.now
                }
            }
        }
        for descriptor in descriptors where descriptor >= 0 { close(descriptor) }
        return max(0, opened - connections)
    }

    /// One probe, as the kubelet's: `GET path` on a new connection, answered within 1 s.
    static func probe(port: Int, path: String) -> Outcome {
        let start = ContinuousClock.now
        let descriptor = connect(port: port, timeout: .seconds(1))
        guard descriptor >= 0 else { return .unanswered }
        defer { close(descriptor) }
        guard send(descriptor, "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n") else { return .unanswered }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now - start < .seconds(1) {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            answer += buffer[0..<count]
        }
        guard ContinuousClock.now - start <= .seconds(1), answer.starts(with: Array("HTTP/1.1 ".utf8)), answer.count >= 12 else { return .unanswered }
        let status = answer[9..<12]
        if status.elementsEqual("503".utf8), answer.suffix(5).elementsEqual("busy\n".utf8) { return .busy }
        if path == "/healthz" && !status.elementsEqual("200".utf8) { return .unanswered }
        return .answered
    }

    /// A connection to 127.0.0.1:`port` whose connect, sends and receives wait at most `timeout`; -1 when none.
    static func connect(port: Int, timeout: Duration) -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return -1 }
        var limit = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: Int(timeout.components.attoseconds / 1_000_000_000_000))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(descriptor)
            return -1
        }
        return descriptor
    }

    /// Whether all of `text` was sent.
    static func send(_ descriptor: Int32, _ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return Glibc.send(descriptor, bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count
    }

    /// Runs blocking socket work on a thread of its own, not on the cooperative pool.
    static func offThePool<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: work()) }.start()
        }
    }
}

private extension Duration {
    var timeInterval: TimeInterval { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

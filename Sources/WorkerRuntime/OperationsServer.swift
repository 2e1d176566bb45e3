import Foundation
import HTTPServer
import Metrics
import Synchronization

/// Whether a process can do its work now, with the reason when it cannot.
public struct Readiness: Sendable {
    public let isReady: Bool
    public let reason: String
    public static let ready = Readiness(isReady: true, reason: "ready")
    public static func notReady(_ reason: String) -> Readiness { Readiness(isReady: false, reason: reason) }
}

/// The operations endpoints of every executable, as a `Service`:
/// `GET /metrics` (Prometheus text, with `iap_ready`), `GET /healthz` (the process answers), `GET /readyz` (200 when
/// `readiness` says ready, else 503 with the reason). Other requests go to `routes` when given
/// (`iap-ingest` serves its API on the same port), else 404. A public-facing server (the ingest's API port next
/// to an operations port) answers `/readyz` without the reason and serves no `/metrics`: internal error text and
/// figures are for operators.
public final class OperationsServer: Service {
    public typealias Routes = @Sendable (HTTPRequest) async -> HTTPResponse?

    private let server: HTTPServer
    private let stopped = Mutex<(done: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    /// The port it listens on (useful with port 0).
    public var port: UInt16 { server.port }

    /// The server's configuration for a port of operations endpoints alone (no API), so that slow clients cannot fail
    /// its probes. Probes and scrapes send their whole head at once: a head has 2 s to arrive, no body is taken, and
    /// when the 32 slots are taken a new connection takes the slot of the one that has waited longest for its head
    /// (`evictsWaitingConnections`), so idle or trickling connections, however many, never keep `/healthz` and
    /// `/readyz` from answering. A per-address cap would not do: the kubelet, Prometheus and a flood may share an
    /// address (a node's, a NAT's), and then the cap would turn the probes away as well.
    public static func operationsConfiguration(host: String, port: UInt16 = 0) -> HTTPServer.Configuration {
        HTTPServer.Configuration(host: host, port: port, maxBodyBytes: 0, requestTimeout: .seconds(2), maxConnections: 32,
                                 evictsWaitingConnections: true)
    }

    /// Binds now, so that a port in use fails at start with a clear message.
    public init(configuration: HTTPServer.Configuration, metrics: MetricsRegistry, readiness: @escaping @Sendable () async -> Readiness,
                routes: Routes? = nil, publicFacing: Bool = false) throws {
        if !publicFacing {
            metrics.declare("iap_ready", .gauge, help: "1 when the process is ready (as /readyz answers at the scrape), 0 when not: the reason is on /readyz and in the log.")
        }
        server = try HTTPServer(configuration: configuration) { request in
            switch (request.method, request.path) {
            case ("GET", "/metrics") where !publicFacing:
                // Readiness as of the scrape: an alert sees a process that answers but cannot work. Bounded, so that a store
                // busy with a batch makes a scrape report not ready (for a moment) rather than time out as a process down.
                metrics.set("iap_ready", to: await Self.readiness(readiness, within: .seconds(2)) ? 1 : 0)
                return HTTPResponse(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: await metrics.render())
            case ("GET", "/healthz"):
                return HTTPResponse(status: 200, contentType: "text/plain", body: "ok\n")
            case ("GET", "/readyz"):
                let state = await readiness()
                let text = publicFacing ? (state.isReady ? "ready" : "not ready") : state.reason
                return HTTPResponse(status: state.isReady ? 200 : 503, contentType: "text/plain", body: text + "\n")
            default:
                if let routes, let response = await routes(request) { return response }
                return HTTPResponse(status: 404, contentType: "text/plain", body: "not found\n")
            }
        }
    }

    /// Whether `readiness` answers ready within `limit`. A check still running then (a store call, which cannot be
    /// cancelled) finishes on its own and is not waited for.
    static func readiness(_ readiness: @escaping @Sendable () async -> Readiness, within limit: Duration) async -> Bool {
        /// The waiting scrape, answered once: by the check or by the limit, whichever comes first.
        final class Answer: Sendable {
            let waiting = Mutex<CheckedContinuation<Bool, Never>?>(nil)
            func give(_ ready: Bool) { waiting.withLock { $0.take() }?.resume(returning: ready) }
        }
        let answer = Answer()
        return await withCheckedContinuation { continuation in
            answer.waiting.withLock { $0 = continuation }
            Task { answer.give(await readiness().isReady) }
            Task {
                try? await Task.sleep(for: limit)
                answer.give(false)
            }
        }
    }

    public func run() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = stopped.withLock { state -> Bool in
                if state.done { return true }
                state.waiter = continuation
                return false
            }
            if resumeNow { continuation.resume() }
        }
        server.shutdown()
        // Requests in progress get their answers (each is bounded by the read timeout and the handler's own limits).
        let deadline = ContinuousClock.now + .seconds(30)
        while server.activeConnections > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20)) // cancellation only ends the wait early
        }
    }

    public func triggerGracefulShutdown() {
        let waiter = stopped.withLock { state -> CheckedContinuation<Void, Never>? in
            state.done = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }
}

import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Metrics
import Synchronization
import Testing
import TestSupport
@testable import WorkerRuntime

/// The operations port's server: probes stay answered under slow clients (the connection slots themselves are
/// `HTTPServerSlotsTests`'s).
@Suite(.timeLimit(.minutes(3)))
struct OperationsServerTests {
    /// An operations port (`OperationsServer.operationsConfiguration`) with a few hundred slow connections from one
    /// address, each holding the start of a head: `/healthz` and `/readyz` are answered by their handlers, not 503 busy.
    @Test func slowConnectionsCannotFailAnOperationsPortsProbes() async throws {
        let operations = try OperationsServer(configuration: OperationsServer.operationsConfiguration(host: "127.0.0.1"), metrics: MetricsRegistry(),
                                              readiness: { .notReady("still joining") })
        let port = Int(operations.port)
        let slow = try await offPool { (0..<300).map { _ in rawConnect(port: port, sending: "GET /healthz HTTP/1.1\r\nHost: a\r\nX-Slow: ") } }
        #expect(slow.allSatisfy { $0 >= 0 })
        for _ in 0..<10 {
            let health = try await offPool { rawHTTP(port: port, "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n") }
            #expect(health.hasPrefix("HTTP/1.1 200"), "\(health)")
            let ready = try await offPool { rawHTTP(port: port, "GET /readyz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n") }
            #expect(ready.hasPrefix("HTTP/1.1 503") && ready.hasSuffix("still joining\n"), "the readiness's own answer: \(ready)")
        }
        slow.forEach { close($0) }
        operations.triggerGracefulShutdown()
        await operations.run()
    }

    /// `iap_ready` follows readiness as of each scrape: an alert sees a process that answers but cannot work.
    @Test func theReadyGaugeFollowsReadinessAtEachScrape() async throws {
        let ready = Mutex(false)
        let operations = try OperationsServer(configuration: OperationsServer.operationsConfiguration(host: "127.0.0.1"), metrics: MetricsRegistry(),
                                              readiness: { ready.withLock { $0 } ? .ready : .notReady("store unreachable") })
        let port = Int(operations.port)
        func scrape() async throws -> String { try await offPool { rawHTTP(port: port, "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n") } }
        #expect(try await scrape().contains("\niap_ready 0\n"))
        ready.withLock { $0 = true }
        #expect(try await scrape().contains("\niap_ready 1\n"))
        operations.triggerGracefulShutdown()
        await operations.run()
    }

    /// A readiness check that does not answer (a store call behind a long batch) makes the scrape report not ready in
    /// time rather than hold it past the scraper's timeout.
    @Test func aReadinessCheckThatHangsReportsNotReadyInTime() async throws {
        // The check answers ready only after the test's own time limit: the answer can only have come from the bound.
        let ready = await OperationsServer.readiness({
            try? await Task.sleep(for: .seconds(600))
            return .ready
        }, within: .milliseconds(200))
        #expect(!ready, "answered at its limit, not at the check's end")
        #expect(await OperationsServer.readiness({ .ready }, within: .seconds(60)))
    }
}

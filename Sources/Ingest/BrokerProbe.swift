import Foundation
import Kafka
import Synchronization
import WorkerRuntime

/// Asks the broker for metadata every few seconds, so that `/readyz` can say whether events can be published
/// without blocking the request on a broker round trip.
public final class BrokerProbe: Service {
    private let admin: KafkaAdmin
    private let interval: Duration
    private let state = Mutex<(reachable: Bool, detail: String, stopping: Bool)>((false, "not checked yet", false))

    public init(kafka: KafkaConfiguration, interval: Duration = .seconds(5)) throws {
        admin = try KafkaAdmin(kafka: kafka)
        self.interval = interval
    }

    /// Whether the last check reached the cluster, and what it found.
    public var status: (reachable: Bool, detail: String) { state.withLock { ($0.reachable, $0.detail) } }

    public func run() async throws {
        while !state.withLock({ $0.stopping }) {
            let admin = self.admin
            // The metadata request blocks: it runs on a thread of its own. Not a dispatch queue: on Linux Swift's
            // tasks run on the dispatch pool, which blocked requests would take from them (see HTTPServer).
            let result: (Bool, String) = await withCheckedContinuation { continuation in
                Thread {
                    do {
                        let metadata = try admin.metadata(timeout: .seconds(3))
                        continuation.resume(returning: (metadata.brokers > 0, "\(metadata.brokers) broker(s)"))
                    } catch {
                        continuation.resume(returning: (false, "\(error)"))
                    }
                }.start()
            }
            state.withLock { $0.reachable = result.0; $0.detail = result.1 }
            let deadline = ContinuousClock.now + interval
            while ContinuousClock.now < deadline, !state.withLock({ $0.stopping }) {
                try? await Task.sleep(for: .milliseconds(100)) // cancellation only ends the wait early
            }
        }
    }

    public func triggerGracefulShutdown() { state.withLock { $0.stopping = true } }
}

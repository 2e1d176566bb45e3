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
            let result: (Bool, String)
            do {
                let brokers = try await onOwnThread { try admin.metadata(timeout: .seconds(3)).brokers } // blocks: off the task pool
                result = (brokers > 0, "\(brokers) broker(s)")
            } catch {
                result = (false, "\(error)")
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

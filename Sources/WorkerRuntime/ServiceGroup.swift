import Foundation
import Synchronization

/// Runs services together until they end; SIGTERM or SIGINT shuts them all down gracefully.
///
/// When one service ends, with or without an error, the others are shut down too: a worker
/// process is only useful whole. The first error is rethrown once every service has returned.
public struct ServiceGroup: Sendable {
    public let services: [any Service]
    public let signals: [Int32]

    public init(services: [any Service], gracefulShutdownSignals signals: [Int32] = [SIGTERM, SIGINT]) {
        self.services = services
        self.signals = signals
    }

    public func run() async throws {
        let services = self.services
        let shutdownAll: @Sendable () -> Void = { services.forEach { $0.triggerGracefulShutdown() } }
        let registration = SignalHandlers.shared.add(signals, run: shutdownAll)
        defer { SignalHandlers.shared.remove(registration) }

        try await withThrowingTaskGroup(of: Void.self) { group in
            for service in services {
                group.addTask { try await service.run() }
            }
            var firstError: (any Error)?
            while !group.isEmpty {
                do {
                    try await group.next()
                } catch {
                    if firstError == nil { firstError = error }
                }
                shutdownAll()
            }
            if let firstError { throw firstError }
        }
    }
}

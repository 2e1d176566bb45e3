import Foundation
import Synchronization

/// An idempotent Kafka producer whose `send` returns only after the broker acknowledged.
///
/// Delivery reports are served by a poll loop on a dedicated thread. `shutdown()` flushes what
/// is still queued; a producer that is simply released stops its thread without flushing.
public final class KafkaProducer: Sendable {
    /// Producer settings; every librdkafka property can be set through `kafka`.
    public struct Configuration: Sendable {
        /// librdkafka properties. Defaults: `enable.idempotence=true`, `acks=all`, `linger.ms=5`.
        public var kafka: KafkaConfiguration
        /// How long `shutdown()` waits for queued messages to be delivered.
        public var flushTimeout: Duration

        public init(kafka: KafkaConfiguration, flushTimeout: Duration = .seconds(30)) {
            self.kafka = kafka
            self.flushTimeout = flushTimeout
        }

        static let defaults = ["enable.idempotence": "true", "acks": "all", "linger.ms": "5"]
    }

    private let core: ProducerCore

    /// Creates the producer and starts its poll thread.
    public init(configuration: Configuration) throws {
        try KafkaLibrary.requireSupportedVersion()
        let client = try RDKafkaClient.make(kind: .producer, configuration: configuration.kafka.withDefaults(Configuration.defaults))
        core = ProducerCore(client: client)
        let core = self.core
        PollThread.start(name: "kafka-producer-poll", iteration: { core.pollOnce() }, finished: { core.finish() })
    }

    deinit { core.requestStop(flushDeadline: nil) }

    /// Sends one record and returns once the broker acknowledged it (`acks=all`). Once queued the record is librdkafka's
    /// copy: `message` is let go then, not held while the acknowledgement is awaited (seconds, when the broker is slow).
    /// - Throws: `KafkaError` (`.produce` when it could not be enqueued, `.delivery` when the broker did not
    ///   acknowledge it within `message.timeout.ms`, `.shutdown` after `shutdown()`).
    @discardableResult
    public func send(_ message: consuming KafkaProducerMessage) async throws -> KafkaDeliveryReport {
        let id = try await core.enqueue(message)
        _ = consume message
        return try await core.delivery(of: id)
    }

    /// Sends records in one batch (all enqueued before any is awaited) and returns each one's outcome, in order.
    public func send(contentsOf messages: [KafkaProducerMessage]) async -> [Result<KafkaDeliveryReport, KafkaError>] {
        await enqueue(contentsOf: messages).results()
    }

    /// Hands records to librdkafka and returns without waiting for the broker, so that the caller can do
    /// other work (e.g. handle the next message) while they are in flight. Await `results()` once.
    public func enqueue(contentsOf messages: [KafkaProducerMessage]) async -> PendingDeliveries {
        var ids: [Result<UInt, KafkaError>] = []
        ids.reserveCapacity(messages.count)
        for message in messages {
            do { ids.append(.success(try await core.enqueue(message))) } catch { ids.append(.failure(Self.kafkaError(error))) }
        }
        return PendingDeliveries(core: core, ids: ids)
    }

    /// Stops accepting records, waits up to `flushTimeout` for queued ones to be delivered, and stops the poll thread.
    /// Records still undelivered then fail with `.shutdown`.
    public func shutdown(flushTimeout: Duration = .seconds(30)) async {
        await withCheckedContinuation { continuation in
            core.requestStop(flushDeadline: ContinuousClock.now + flushTimeout, whenStopped: continuation)
        }
    }

    /// Errors librdkafka reported since the last call (e.g. brokers unreachable); the client recovers from
    /// those that are not fatal by itself.
    public func drainErrors() -> [KafkaError] { core.client.events.drainErrors() }

    /// Records enqueued whose outcome librdkafka has not reported yet (waiting, in flight, or a delivery report not
    /// served): 0 once each was acknowledged or failed.
    var undeliveredCount: Int { Int(core.client.outQueueLength) }

    fileprivate static func kafkaError(_ error: any Error) -> KafkaError {
        error as? KafkaError ?? KafkaError(code: .produce, message: "\(error)")
    }
}

/// Records enqueued by `KafkaProducer.enqueue(contentsOf:)`, not necessarily acknowledged yet.
public struct PendingDeliveries: Sendable {
    fileprivate let core: ProducerCore
    fileprivate let ids: [Result<UInt, KafkaError>]

    /// Waits for the broker's answer to each record and returns them in order (`.shutdown` if the producer
    /// stopped first). Call it once: a delivery report is handed out a single time.
    public func results() async -> [Result<KafkaDeliveryReport, KafkaError>] {
        var results: [Result<KafkaDeliveryReport, KafkaError>] = []
        results.reserveCapacity(ids.count)
        for id in ids {
            switch id {
            case .success(let id):
                do { results.append(.success(try await core.delivery(of: id))) } catch {
                    results.append(.failure(KafkaProducer.kafkaError(error)))
                }
            case .failure(let error):
                results.append(.failure(error))
            }
        }
        return results
    }
}

/// The producer's state shared with its poll thread.
private final class ProducerCore: Sendable {
    enum Slot {
        case waiting(CheckedContinuation<KafkaDeliveryReport, any Error>)
        case done(Result<KafkaDeliveryReport, KafkaError>)
    }

    struct State {
        var nextID: UInt = 1
        var slots: [UInt: Slot] = [:]
        var accepting = true
        /// Set by `requestStop`: flush until this instant (or not at all when `nil`), then stop.
        var stopRequested = false
        var flushDeadline: ContinuousClock.Instant?
        var whenStopped: [CheckedContinuation<Void, Never>] = []
        var stopped = false
    }

    let client: RDKafkaClient
    private let state = Mutex(State())

    init(client: RDKafkaClient) { self.client = client }

    func enqueue(_ message: KafkaProducerMessage) async throws -> UInt {
        let id = try state.withLock { state -> UInt in
            guard state.accepting else { throw KafkaError(code: .shutdown, message: "producer is shut down") }
            defer { state.nextID += 1 }
            return state.nextID
        }
        while true {
            do {
                try client.produce(message, id: id)
                return id
            } catch let error as KafkaError where error.rdKafkaName == "_QUEUE_FULL" {
                // The local queue drains as the poll thread serves delivery reports.
                try await Task.sleep(for: .milliseconds(2))
            }
        }
    }

    func delivery(of id: UInt) async throws -> KafkaDeliveryReport {
        try await withCheckedThrowingContinuation { continuation in
            let finished: Result<KafkaDeliveryReport, KafkaError>? = state.withLock { state in
                if case .done(let result) = state.slots.removeValue(forKey: id) { return result }
                if state.stopped { return .failure(KafkaError(code: .shutdown, message: "producer stopped before delivery")) }
                state.slots[id] = .waiting(continuation)
                return nil
            }
            if let finished { continuation.resume(with: finished) }
        }
    }

    /// One poll-loop iteration; `false` ends the loop.
    func pollOnce() -> Bool {
        client.poll(timeoutMs: 50)
        deliver(client.events.drainDeliveries())
        let (stopRequested, deadline) = state.withLock { ($0.stopRequested, $0.flushDeadline) }
        guard stopRequested else { return true }
        guard let deadline, client.outQueueLength > 0, ContinuousClock.now < deadline else { return false }
        return true
    }

    func requestStop(flushDeadline: ContinuousClock.Instant?, whenStopped: CheckedContinuation<Void, Never>? = nil) {
        let alreadyStopped = state.withLock { state -> Bool in
            state.accepting = false
            if !state.stopRequested {
                state.stopRequested = true
                state.flushDeadline = flushDeadline
            }
            if let whenStopped, !state.stopped { state.whenStopped.append(whenStopped) }
            return state.stopped
        }
        if alreadyStopped { whenStopped?.resume() }
    }

    /// Called on the poll thread when its loop ends: fails whatever is still waiting.
    func finish() {
        deliver(client.events.drainDeliveries())
        let (waiting, stoppedWaiters) = state.withLock { state -> ([CheckedContinuation<KafkaDeliveryReport, any Error>], [CheckedContinuation<Void, Never>]) in
            state.stopped = true
            // Finished deliveries stay for their senders to collect; only waiting ones fail.
            var waiting: [CheckedContinuation<KafkaDeliveryReport, any Error>] = []
            for (id, slot) in state.slots {
                if case .waiting(let continuation) = slot {
                    waiting.append(continuation)
                    state.slots[id] = nil
                }
            }
            defer { state.whenStopped.removeAll() }
            return (waiting, state.whenStopped)
        }
        waiting.forEach { $0.resume(throwing: KafkaError(code: .shutdown, message: "producer stopped before delivery")) }
        stoppedWaiters.forEach { $0.resume() }
    }

    private func deliver(_ deliveries: [RDKafkaEvents.Delivery]) {
        guard !deliveries.isEmpty else { return }
        let ready = state.withLock { state -> [(CheckedContinuation<KafkaDeliveryReport, any Error>, Result<KafkaDeliveryReport, KafkaError>)] in
            var ready: [(CheckedContinuation<KafkaDeliveryReport, any Error>, Result<KafkaDeliveryReport, KafkaError>)] = []
            for delivery in deliveries {
                if case .waiting(let continuation) = state.slots.removeValue(forKey: delivery.id) {
                    ready.append((continuation, delivery.result))
                } else {
                    state.slots[delivery.id] = .done(delivery.result)
                }
            }
            return ready
        }
        for (continuation, result) in ready { continuation.resume(with: result.mapError { $0 as any Error }) }
    }
}

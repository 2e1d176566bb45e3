import Foundation
import Kafka
import Synchronization
import WorkerRuntime

/// A batch's events sent at once: a receiver that takes 50 ms an answer would otherwise cap an endpoint at 20 events a
/// second per partition.
extension WebhookStage {
    /// Sends each user's (key's) events of the batch one at a time, in order, and different users' at once (as many as the
    /// client has connections). The answer is the batch's prefix up to the first failure, as the runner takes it; events
    /// after it that were delivered meanwhile are kept (`AnsweredAhead`) and answered from there when the runner hands them
    /// again, so that they are not sent twice. A user whose event failed has nothing after it sent.
    public func handle(batch messages: [KafkaMessage]) async -> [Result<StageResult, any Error>] {
        var chains: [Data: [Int]] = [:]
        var order: [Data] = []
        for (index, message) in messages.enumerated() {
            // Messages without a key wait for nothing: each is a chain of its own.
            let key = message.key.map { Data([1]) + $0 } ?? Data([0]) + withUnsafeBytes(of: index) { Data($0) }
            if chains[key] == nil { order.append(key) }
            chains[key, default: []].append(index)
        }
        let outcomes = await withTaskGroup(of: [(Int, Result<StageResult, any Error>)].self) { group in
            for key in order {
                let chain = chains[key] ?? []
                group.addTask {
                    var done: [(Int, Result<StageResult, any Error>)] = []
                    for index in chain {
                        // Revoked (its next owner sends the rest) or shutting down: nothing more is sent.
                        if KafkaConsumer.isHandlingRevokedPartition || Task.isCancelled {
                            done.append((index, .failure(TransientError("partition revoked or shutting down"))))
                            break
                        }
                        do {
                            done.append((index, .success(try await self.handle(messages[index]))))
                        } catch {
                            done.append((index, .failure(error)))
                            break
                        }
                    }
                    return done
                }
            }
            var outcomes: [Int: Result<StageResult, any Error>] = [:]
            for await done in group { for (index, outcome) in done { outcomes[index] = outcome } }
            return outcomes
        }
        var answers: [Result<StageResult, any Error>] = []
        for index in messages.indices {
            guard let outcome = outcomes[index] else { break }
            answers.append(outcome)
            if case .failure = outcome { break }
        }
        for (index, outcome) in outcomes where index >= answers.count {
            if case .success(let result) = outcome { answeredAhead.keep(result, for: messages[index]) }
        }
        return answers
    }
}

/// Results of messages a batch handled beyond its answered prefix, until the runner hands them again. Positions on a topic
/// are never reused, so a kept result stays true; at most `limit` are kept, the oldest forgotten first (a partition revoked
/// meanwhile, or a message re-driven by another replica, leaves its own behind; one forgotten is sent again, as
/// at-least-once delivery allows).
final class AnsweredAhead: Sendable {
    struct Position: Hashable {
        let topic: String
        let partition: Int32
        let offset: Int64

        init(_ message: KafkaMessage) {
            topic = message.topic
            partition = message.partition
            offset = message.offset
        }
    }

    static let limit = 10_000
    private struct Kept {
        var results: [Position: StageResult] = [:]
        /// Positions in the order they were kept (some taken since), from `head` on.
        var order: [Position] = []
        var head = 0

        /// Drops what `order` holds of positions taken or forgotten, once that is most of it.
        mutating func compact() {
            guard order.count - head > 2 * max(results.count, 64) || head > order.count / 2 else { return }
            order = order[head...].filter { results[$0] != nil }
            head = 0
        }
    }
    private let kept = Mutex(Kept())

    func keep(_ result: StageResult, for message: KafkaMessage) {
        kept.withLock { kept in
            let position = Position(message)
            if kept.results.updateValue(result, forKey: position) == nil { kept.order.append(position) }
            while kept.results.count > Self.limit, kept.head < kept.order.count {
                kept.results[kept.order[kept.head]] = nil
                kept.head += 1
            }
            kept.compact()
        }
    }

    /// The result kept for `message`, forgotten now; nil when none was.
    func take(_ message: KafkaMessage) -> StageResult? {
        kept.withLock { kept in
            let result = kept.results.removeValue(forKey: Position(message))
            kept.compact()
            return result
        }
    }
}

/// At most `count` requests of an endpoint on their way at once, across its partitions' batches: a request is signed once
/// it has its turn, not while it waits for a connection behind a slow receiver (its timestamp would age past the
/// receiver's tolerance).
final class SendPermits: Sendable {
    private struct State {
        var free: Int
        var waiting: [CheckedContinuation<Void, Never>] = []
        var head = 0
    }
    private let state: Mutex<State>

    init(_ count: Int) { state = Mutex(State(free: max(1, count))) }

    /// Waits for a free permit and takes it; `release()` gives it back.
    func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = state.withLock { state -> Bool in
                guard state.free == 0 else {
                    state.free -= 1
                    return true
                }
                state.waiting.append(continuation)
                return false
            }
            if granted { continuation.resume() }
        }
    }

    /// How many wait for a permit now.
    var waiting: Int { state.withLock { $0.waiting.count - $0.head } }

    /// Hands the permit to the longest waiting, else frees it.
    func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.head < state.waiting.count else {
                state.free += 1
                return nil
            }
            let next = state.waiting[state.head]
            state.head += 1
            if state.head == state.waiting.count {
                state.waiting.removeAll(keepingCapacity: true)
                state.head = 0
            }
            return next
        }
        next?.resume()
    }
}

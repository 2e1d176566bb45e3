import Kafka

/// What a stage decided about one message.
public enum StageResult: Sendable {
    /// Events to publish; the input is done once the broker acknowledged all of them.
    case publish([KafkaProducerMessage])
    /// The message cannot be processed, ever: kept on the dead-letter topic with the reason.
    case deadLetter(reason: String, detail: String)
    /// Events to publish now, and the message to be handed back to the stage after `after` (e.g. a payment still
    /// pending at the store: answered, then asked about again). The runner parks it without its key, so the key's
    /// later messages do not wait; re-checks continue with growing delays for `parkedBudget`. Without parking, the
    /// events are published and the message is done.
    case recheck(publish: [KafkaProducerMessage], after: Duration)
}

/// An error after which the same work may succeed later (database busy or failing over, store API
/// down, broker unavailable). The runner retries it with backoff on that partition, within its retry budget.
public struct TransientError: Error, Sendable, CustomStringConvertible {
    public let description: String
    /// How long the other side asked us to wait (e.g. a store API's `Retry-After`): the retry waits at least that.
    public let retryAfter: Duration?
    public init(_ description: String, retryAfter: Duration? = nil) {
        self.description = description
        self.retryAfter = retryAfter
    }
}

/// One pipeline stage's message handling.
public protocol MessageStage: Sendable {
    /// `verifier`, `granter`, …: the consumer group suffix, log field and dead-letter `stage`.
    var name: String { get }
    var topics: [String] { get }
    func handle(_ message: KafkaMessage) async throws -> StageResult
    /// Handles consecutive messages of one partition at once, e.g. with one database transaction for all of them.
    /// Answers a prefix of `messages`, in order: the outcome of each of its messages is final (its effects are done),
    /// and a `.failure` may only end it. The runner takes a `.failure` over (retrying it in place, parking or
    /// dead-lettering it), hands the message after the prefix to `handle(_:)` alone, and then batches the rest anew; so
    /// a stage whose batch failed undoes what it did and answers `[]`. Default: `handle(_:)` for each message, up to
    /// the first that throws.
    func handle(batch messages: [KafkaMessage]) async -> [Result<StageResult, any Error>]
    /// Whether `error` is worth retrying. Default: `TransientError` and retriable Kafka errors.
    func isTransient(_ error: any Error) -> Bool
    /// Whether `message` waits behind a parked message of its key (and, parked itself, holds the key's later ones).
    /// Default: yes. No for what the stage records whatever came before it, such as a consumption report, which the
    /// store keeps until its purchase is granted: held behind a grant that fails for hours, it would not be known when
    /// the purchase's deadline comes.
    func keepsOrder(_ message: KafkaMessage) -> Bool
}

extension MessageStage {
    public func handle(batch messages: [KafkaMessage]) async -> [Result<StageResult, any Error>] {
        var results: [Result<StageResult, any Error>] = []
        for message in messages {
            do {
                results.append(.success(try await handle(message)))
            } catch {
                results.append(.failure(error))
                break
            }
        }
        return results
    }

    public func isTransient(_ error: any Error) -> Bool {
        if error is TransientError { return true }
        if let kafka = error as? KafkaError { return kafka.isRetriable }
        return false
    }

    public func keepsOrder(_ message: KafkaMessage) -> Bool { true }
}

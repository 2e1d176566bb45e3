import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import WorkerRuntime

/// What every stage shares: the codec for its events, and the clock.
public struct StageContext: Sendable {
    public let codec: EventCodec
    public let logger: Logger
    public let now: @Sendable () -> Date

    public init(codec: EventCodec, logger: Logger, now: @escaping @Sendable () -> Date = Date.init) {
        self.codec = codec
        self.logger = logger
        self.now = now
    }

    /// A dead letter for a message the codec refused.
    func deadLetter(_ invalid: EventCodec.Invalid) -> StageResult { .deadLetter(reason: invalid.reason, detail: invalid.detail) }

    /// The message of `event`, stamped now, when it matches its schema (what the next stage will check); else nil.
    func conformingMessage<Event: PipelineEvent>(_ event: Event) -> KafkaProducerMessage? {
        do {
            return try codec.conformingMessage(event, time: now())
        } catch {
            return nil // Not even encodable: certainly not what the next stage accepts.
        }
    }

    func messages(_ events: [any PipelineEvent]) throws -> StageResult { .publish(try outputs(events)) }

    /// The messages of `events`, stamped now.
    func outputs(_ events: [any PipelineEvent]) throws -> [KafkaProducerMessage] {
        let time = now()
        return try events.map { try codec.message($0, time: time) }
    }

    /// `outputs(events)`, the rejections among them kept first for their users' histories (`recordRejections`): in a batch,
    /// with its other writes (one insert for all its rejections), so that they are kept if and only if they are published.
    func outputs(_ events: [any PipelineEvent], keepingRejectionsIn store: any PurchaseRepository) async throws -> [KafkaProducerMessage] {
        try await store.recordRejections(events.compactMap { ($0 as? PurchaseRejectedEvent).map(RejectionRecord.init) })
        return try outputs(events)
    }

    func messages(_ events: [any PipelineEvent], keepingRejectionsIn store: any PurchaseRepository) async throws -> StageResult {
        .publish(try await outputs(events, keepingRejectionsIn: store))
    }
}

extension RejectionRecord {
    /// What `purchase.rejected` says, as its user's history keeps it.
    init(_ event: PurchaseRejectedEvent) {
        self.init(causeID: event.causeID, userId: event.userId, store: event.store, transactionId: event.transactionId, productId: event.productId,
                  reason: event.reason, rejectedAt: event.rejectedAt)
    }
}

/// A stage that uses the purchase store: the store's errors a retry can fix are transient too.
public protocol StoreBackedStage: MessageStage {
    /// The purchase store the stage decides with.
    var repository: any PurchaseRepository { get }
}

extension StoreBackedStage {
    /// `handle(_:)` for the leading messages of `messages` that are `batchable`, all in one transaction of the repository
    /// (`PurchaseRepository.batch`): each decided as if alone (a repeat within the batch answers as a repeat), one commit for
    /// all, the outputs published by the runner after it. A message that is not batchable (it calls another service,
    /// which must not happen while the transaction holds the store) is handled alone. When message k fails, everything
    /// is rolled back and the k before it are handled again in a transaction of their own; the runner then hands k to
    /// `handle(_:)` alone (its failure may have been the batch's doing, e.g. locks held longer) and batches the rest.
    /// If that fails too, nothing is answered and the runner takes the messages one at a time.
    /// - Parameter readingAhead: the purchases the batch decides on: those recorded are read (and locked) at its start
    ///   in one statement (`PurchaseRepository.readAhead`) rather than one by one.
    /// - Parameter withOwnersBalances: their owners' balances are read ahead too (for grants).
    /// - Parameter handle: how each message is handled; `handle(_:)` by default.
    func handleInOneTransaction(_ messages: [KafkaMessage], batchable: (KafkaMessage) -> Bool = { _ in true },
                                readingAhead keys: [PurchaseKey] = [], withOwnersBalances: Bool = false,
                                using handle: ((KafkaMessage) async throws -> StageResult)? = nil) async -> [Result<StageResult, any Error>] {
        let handle = handle ?? { try await self.handle($0) }
        let run = messages.prefix(while: batchable)
        guard run.count > 1 else {
            guard let first = messages.first else { return [] }
            do { return [.success(try await handle(first))] } catch { return [.failure(error)] }
        }
        var count = run.count
        var failed = false
        while true {
            var failure: Int?
            do {
                let store = repository
                let results = try await store.batch {
                    try await store.readAhead(keys, ownersBalances: withOwnersBalances)
                    var results: [Result<StageResult, any Error>] = []
                    results.reserveCapacity(count)
                    for (index, message) in run.prefix(count).enumerated() {
                        do {
                            results.append(.success(try await handle(message)))
                        } catch {
                            failure = index
                            throw error
                        }
                    }
                    return results
                }
                return results
            } catch {
                // Rolled back. Not a message's failure (BEGIN or COMMIT), a second one, or the first message's: nothing
                // is answered (the first message then goes alone).
                guard !failed, let failure, failure > 0 else { return [] }
                failed = true
                count = failure
            }
        }
    }

    public func isTransient(_ error: any Error) -> Bool {
        repository.isTransient(error) || error is TransientError || (error as? KafkaError)?.isRetriable == true
    }
}

extension GrantedItem {
    /// An item of the store's ledger as `item.granted` reports it, with the user's resulting balance of its currency.
    init(_ item: GrantItem, balances: [ItemCode: Int64] = [:]) {
        let currency = item.kind == .currency
        self.init(kind: currency ? .currency : .entitlement, code: item.code, amount: currency ? item.amount : nil,
                  expiresAt: item.expiresAt, balance: currency ? balances[item.code] : nil)
    }
}

extension PurchaseKey {
    /// The key as errors that are logged name it: a Google Play purchase recorded by its token (no order id) by the
    /// token's fingerprint (`Fingerprint.transactionId`).
    var logged: String { "\(store.rawValue):\(Fingerprint.transactionId(transactionId))" }
}

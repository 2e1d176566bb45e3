import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import Synchronization

/// What the pipeline answered, read from its output topics (`item.granted`, `purchase.rejected`, dead letters,
/// `refund.due`, `transaction.finished`) by a consumer group of its own: the one watcher of the demo, the benchmark
/// and the chaos run. A worker killed after its commit answers a redelivered input again, so events are told
/// apart by their CloudEvents id (`ce_id`), and purchases by their transaction id.
public final class PipelineWatcher: Sendable {
    public struct Seen: Sendable {
        /// `transaction.finished` by transaction id: the distinct event ids (one unless a purchase was finished twice).
        public var finished: [TransactionID: Set<String>] = [:]
        /// When the first `transaction.finished` of each transaction arrived here.
        public var firstFinishedAt: [TransactionID: Date] = [:]
        /// When the last first-finish arrived (the end of a throughput run).
        public var lastFirstFinishedAt: Date?
        /// `item.granted` answers to submissions: first grants and "already granted" answers, repeats included (not the
        /// `ended:…` answers an upgrade adds for the periods it ended, nor a refund reversal's `regranted:…`).
        public var grantAnswers = 0
        public var alreadyGrantedAnswers = 0
        /// `purchase.rejected` records (repeats included) with reason `revoked`: submissions of purchases refunded before or since.
        public var revokedAnswers = 0
        /// Transactions with any `item.granted`.
        public var grantedTransactions = Set<TransactionID>()
        /// The expiry of the entitlement in the last `item.granted` of each transaction that gave one with an expiry (a
        /// subscription period): what a backend mirroring the events holds it until. An upgrade's `ended:…` answer moves it.
        public var lastExpiry: [TransactionID: Date] = [:]
        /// `purchase.rejected` by submission id: the reasons (rejections carry no transaction id from unverified data).
        public var rejected: [String: Set<String>] = [:]
        /// `purchase.rejected` of verified transactions (a repeat of a purchase revoked or flagged), by transaction id: the reasons.
        public var rejectedTransactions: [TransactionID: Set<String>] = [:]
        /// Distinct `purchase.rejected` events by reason.
        public var rejectionsByReason: [String: Set<String>] = [:]
        /// Dead letters by the original message's key: the reasons.
        public var deadLettered: [String: Set<String>] = [:]
        /// Distinct dead-letter events.
        public var deadLetterEvents = Set<String>()
        /// `refund.due` by transaction id: the distinct event ids (one: a purchase is flagged once).
        public var refundDue: [TransactionID: Set<String>] = [:]
        /// Output records read, repeats included.
        public var records = 0

        public init() {}

        /// Distinct rejection events.
        public var rejectionCount: Int { rejectionsByReason.values.reduce(0) { $0 + $1.count } }
    }

    private final class Box: Sendable { let seen = Mutex(Seen()) }
    private let box = Box()
    private let consumer: KafkaConsumer
    private let task: Task<Void, any Error>

    /// Starts reading `codec`'s output topics in the consumer group `groupID`, from their beginning.
    public init(kafka: KafkaConfiguration, codec: EventCodec, groupID: String) throws {
        let topics = [EventType.itemGranted, .purchaseRejected, .deadLetter, .refundDue, .transactionFinished].map(codec.topic)
        consumer = try KafkaConsumer(configuration: .init(kafka: kafka, groupID: groupID, topics: topics))
        task = Task { [consumer, box] in
            try await consumer.run { message in
                guard let value = message.value, let fields = JSONValue.parse(Array(value))?.objectValue else { return }
                let type = message.header("ce_type").flatMap(EventType.init(ceType:))
                let eventId = message.header("ce_id") ?? ""
                let transactionId = TransactionID(fields["transactionId"]?.stringValue ?? "")
                let reason = fields["reason"]?.stringValue ?? ""
                let expiry = fields["items"]?.arrayValue?.lazy.compactMap { $0.objectValue?["expiresAt"]?.stringValue.flatMap(RFC3339.parse) }.first
                let now = Date()
                box.seen.withLock { seen in
                    seen.records += 1
                    switch type {
                    case .transactionFinished:
                        if seen.firstFinishedAt[transactionId] == nil {
                            seen.firstFinishedAt[transactionId] = now
                            seen.lastFirstFinishedAt = now
                        }
                        seen.finished[transactionId, default: []].insert(eventId)
                    case .itemGranted:
                        // An upgrade's answer for a period it ended, and a refund reversal's re-grant, answer no submission.
                        if !eventId.hasPrefix("ended:") && !eventId.hasPrefix("regranted:") {
                            if fields["alreadyGranted"] == .bool(true) { seen.alreadyGrantedAnswers += 1 } else { seen.grantAnswers += 1 }
                        }
                        seen.grantedTransactions.insert(transactionId)
                        if let expiry { seen.lastExpiry[transactionId] = expiry }
                    case .purchaseRejected:
                        seen.rejected[fields["submissionId"]?.stringValue ?? "", default: []].insert(reason)
                        if transactionId.byteCount > 0 { seen.rejectedTransactions[transactionId, default: []].insert(reason) }
                        if reason == "revoked" { seen.revokedAnswers += 1 }
                        seen.rejectionsByReason[reason, default: []].insert(eventId)
                    case .deadLetter:
                        let key = fields["key"]?.stringValue.flatMap { Data(base64Encoded: $0) }.map { String(decoding: $0, as: UTF8.self) } ?? ""
                        seen.deadLettered[key, default: []].insert(reason)
                        seen.deadLetterEvents.insert(eventId)
                    case .refundDue: seen.refundDue[transactionId, default: []].insert(eventId)
                    default: break
                    }
                }
            }
        }
    }

    /// Whether the watcher holds its partitions (start the clock only then).
    public var isAssigned: Bool { !consumer.assignment.isEmpty }
    public var seen: Seen { box.seen.withLock { $0 } }
    /// Reads the state under the lock without copying it (for polls of a large run).
    public func read<T>(_ body: (Seen) -> T) -> T { box.seen.withLock { body($0) } }

    /// Distinct outcomes of `input` seen so far: finished or flagged valid purchases (but those `excluded`, whose outcome
    /// the topics do not tell), rejected forgeries, dead-lettered malformed and trapping messages (a run's progress).
    public func outcomes(of input: PurchaseInput, excluding excluded: Set<TransactionID> = []) -> Int {
        read { seen in
            input.unique.count(where: {
                !excluded.contains($0.transactionId) && (seen.finished[$0.transactionId] != nil || seen.refundDue[$0.transactionId] != nil)
            })
                + input.forged.keys.count(where: { seen.rejected[$0] != nil }) + input.malformed.count(where: { seen.deadLettered[$0] != nil })
                + input.trapping.keys.count(where: { seen.deadLettered[$0] != nil })
        }
    }

    /// Leaves the group and waits for the consumer's end.
    public func stop() async {
        consumer.triggerGracefulShutdown()
        _ = try? await task.value // Its end only matters for a clean exit; what it saw was read already.
    }
}

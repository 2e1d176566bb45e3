import Foundation
import JSON
import Kafka
import PurchaseEvents
import Synchronization

/// What the pipeline answered during a chaos run, read from its output topics.
final class ChaosWatcher: Sendable {
    struct Seen: Sendable {
        /// `transaction.finished` by transaction id: the distinct event ids (one unless a purchase was finished twice).
        var finished: [String: Set<String>] = [:]
        /// `purchase.rejected` by submission id: the reasons.
        var rejected: [String: Set<String>] = [:]
        /// Dead letters by the original message's key: the reasons.
        var deadLettered: [String: Set<String>] = [:]
        var grantAnswers = 0
        var alreadyGrantedAnswers = 0
        /// Output records read, repeats included (a worker killed after its commit answers again).
        var records = 0
    }

    private final class Box: Sendable { let seen = Mutex(Seen()) }
    private let box = Box()
    private let consumer: KafkaConsumer
    private let task: Task<Void, any Error>

    init(kafka: KafkaConfiguration, codec: EventCodec, groupID: String) throws {
        let topics = [EventType.transactionFinished, .purchaseRejected, .deadLetter, .itemGranted].map(codec.topic)
        consumer = try KafkaConsumer(configuration: .init(kafka: kafka, groupID: groupID, topics: topics))
        task = Task { [consumer, box] in
            try await consumer.run { message in
                guard let value = message.value, let fields = JSONValue.parse(Array(value))?.objectValue else { return }
                let type = message.header("ce_type").flatMap(EventType.init(ceType:))
                let id = fields["transactionId"]?.stringValue ?? ""
                box.seen.withLock { seen in
                    seen.records += 1
                    switch type {
                    case .transactionFinished: seen.finished[id, default: []].insert(message.header("ce_id") ?? "")
                    case .purchaseRejected:
                        seen.rejected[fields["submissionId"]?.stringValue ?? "", default: []].insert(fields["reason"]?.stringValue ?? "")
                    case .deadLetter:
                        let key = fields["key"]?.stringValue.flatMap { Data(base64Encoded: $0) }.map { String(decoding: $0, as: UTF8.self) } ?? ""
                        seen.deadLettered[key, default: []].insert(fields["reason"]?.stringValue ?? "")
                    case .itemGranted:
                        if fields["alreadyGranted"] == .bool(true) { seen.alreadyGrantedAnswers += 1 } else { seen.grantAnswers += 1 }
                    default: break
                    }
                }
            }
        }
    }

    var isAssigned: Bool { !consumer.assignment.isEmpty }
    var snapshot: Seen { box.seen.withLock { $0 } }

    /// Distinct outcomes of `input` seen so far: finished valid purchases, rejected forgeries, dead-lettered malformed messages.
    func outcomes(of input: ChaosInput) -> Int {
        box.seen.withLock { seen in
            input.unique.count(where: { seen.finished[$0.transactionId] != nil }) + input.forged.keys.count(where: { seen.rejected[$0] != nil })
                + input.malformed.count(where: { seen.deadLettered[$0] != nil })
        }
    }

    func stop() async {
        consumer.triggerGracefulShutdown()
        _ = try? await task.value // Its end only matters for a clean exit; the figures were read already.
    }
}

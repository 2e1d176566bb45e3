import Identifiers
import Crypto
import Foundation
import Kafka

/// Where a parked message came from: the stage that parked it and its coordinates on the input topic.
public struct ParkedOrigin: Hashable, Sendable, CustomStringConvertible {
    public var stage: String
    public var topic: String
    public var partition: Int32
    public var offset: Int64

    public init(stage: String, topic: String, partition: Int32, offset: Int64) {
        self.stage = stage
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }

    public var description: String { "\(topic)[\(partition)]@\(offset)" }
}

/// What the runners know about parked messages, kept where every replica of a stage sees it (the purchase
/// store): which keys have a message parked, so that their later messages wait behind it wherever the partition
/// is handled, and which parked records are not re-driven yet.
public protocol ParkingLedger: Sendable {
    /// Records the message at `origin` as parked by the retry topic's record `token`, under `key` (nil: nothing waits
    /// behind it), `recheck` when it was answered and is only asked about again. For a message parked before, the
    /// record, key and kind are replaced; when it was first parked stays.
    func recordParked(_ origin: ParkedOrigin, key: OrderingKey?, recheck: Bool, token: String, reason: String, at: Date) async throws
    /// The messages of `stage` with `key` parked and not re-driven yet, oldest first.
    func parked(stage: String, key: OrderingKey) async throws -> [ParkedOrigin]
    /// Which of `keys` have a message of `stage` parked and not re-driven yet (a batch's messages, looked up at once).
    func parkedKeys(stage: String, among keys: Set<OrderingKey>) async throws -> Set<OrderingKey>
    /// The token of the current record of the message at `origin`; nil when it is not parked (any more).
    func parkedToken(_ origin: ParkedOrigin) async throws -> String?
    /// Forgets the message at `origin`: re-driven (done or dead-lettered).
    func releaseParked(_ origin: ParkedOrigin) async throws
}

extension ParkingLedger {
    /// One `parked(stage:key:)` per key.
    public func parkedKeys(stage: String, among keys: Set<OrderingKey>) async throws -> Set<OrderingKey> {
        var parked: Set<OrderingKey> = []
        for key in keys where !(try await self.parked(stage: stage, key: key)).isEmpty { parked.insert(key) }
        return parked
    }
}

/// What a runner needs to park: the ledger, and a consumer of the retry topic (its own group) for the re-driver.
public struct Parking: Sendable {
    public let ledger: any ParkingLedger
    public let consumer: KafkaConsumer
    public let topic: String

    public init(ledger: any ParkingLedger, consumer: KafkaConsumer, topic: String) {
        self.ledger = ledger
        self.consumer = consumer
        self.topic = topic
    }
}

/// A record on the retry topic: the original key, value and headers, with headers saying where it came from,
/// when it was parked, when to try it again, how often it was tried, which record it is (`token`), and whether the
/// stage's answer to it was published already (`answered`).
struct ParkedRecord {
    enum Header {
        static let prefix = "iap-parked-"
        static let stage = "iap-parked-stage", topic = "iap-parked-topic", partition = "iap-parked-partition", offset = "iap-parked-offset"
        static let parkedAt = "iap-parked-at", due = "iap-parked-due", reason = "iap-parked-reason", token = "iap-parked-token"
        static let attempts = "iap-parked-attempts", answered = "iap-parked-answered"
    }

    var origin: ParkedOrigin
    var parkedAt: Date
    var due: Date
    /// Names this record; the ledger knows the current one.
    var token: String
    /// Re-drives that failed (or re-checks) so far.
    var attempts: Int
    var reason: String
    /// Whether the outputs of the stage's `.recheck` answer were published: then later re-checks publish nothing. A
    /// message parked failing (or behind its key) is answered when the re-driver first gets that answer.
    var answered: Bool
    /// The message as the stage first received it.
    var original: KafkaMessage

    /// Reads a record of the retry topic; nil when it lacks the headers a runner writes.
    init?(_ record: KafkaMessage) {
        guard let stage = record.header(Header.stage), let topic = record.header(Header.topic),
              let partition = record.header(Header.partition).flatMap({ Int32($0) }), let offset = record.header(Header.offset).flatMap({ Int64($0) }),
              let parkedAt = record.header(Header.parkedAt).flatMap({ Int64($0) }), let due = record.header(Header.due).flatMap({ Int64($0) }),
              let token = record.header(Header.token), let attempts = record.header(Header.attempts).flatMap({ Int($0) })
        else { return nil }
        self.token = token
        self.attempts = attempts
        reason = record.header(Header.reason) ?? ""
        // Records from before the header: only re-checks parked as answered, with this reason.
        answered = record.header(Header.answered).map { $0 == "1" } ?? (reason == "re-check")
        origin = ParkedOrigin(stage: stage, topic: topic, partition: partition, offset: offset)
        self.parkedAt = Date(timeIntervalSince1970: Double(parkedAt) / 1000)
        self.due = Date(timeIntervalSince1970: Double(due) / 1000)
        original = KafkaMessage(topic: topic, partition: partition, offset: offset, key: record.key, value: record.value,
                                headers: record.headers.filter { !$0.key.hasPrefix(Header.prefix) }, timestamp: record.timestamp)
    }

    /// A new record parking `message` (from `stage`'s input) first, due at `due`; `answered` when the stage's answer
    /// to it was published (a re-check).
    init(parking message: KafkaMessage, stage: String, reason: String, answered: Bool, at now: Date, due: Date) {
        origin = ParkedOrigin(stage: stage, topic: message.topic, partition: message.partition, offset: message.offset)
        parkedAt = now
        self.due = due
        token = UUID().uuidString
        attempts = 0
        self.reason = reason
        self.answered = answered
        original = message
    }

    /// The same parked message, due at `due` after `attempts`: a new record (token) when `renamed`.
    func again(due: Date, attempts: Int, reason: String, renamed: Bool) -> ParkedRecord {
        var next = self
        next.due = due
        next.attempts = attempts
        next.reason = reason
        if renamed { next.token = UUID().uuidString }
        return next
    }

    /// The record for the retry topic `topic`. Keyed as the original, so that one key's parked records share a
    /// partition of the retry topic.
    func message(topic: String) -> KafkaProducerMessage {
        func milliseconds(_ date: Date) -> String { String(Int64((date.timeIntervalSince1970 * 1000).rounded())) }
        let headers = [(Header.stage, origin.stage), (Header.topic, origin.topic), (Header.partition, String(origin.partition)),
                       (Header.offset, String(origin.offset)), (Header.parkedAt, milliseconds(parkedAt)), (Header.due, milliseconds(due)),
                       (Header.token, token), (Header.attempts, String(attempts)), (Header.answered, answered ? "1" : "0"),
                       (Header.reason, String(reason.prefix(500)))].map { KafkaHeader(key: $0.0, string: $0.1) }
        return KafkaProducerMessage(topic: topic, key: original.key, value: original.value,
                                    headers: original.headers.filter { !$0.key.hasPrefix(Header.prefix) } + headers)
    }

    /// The key a message's order is kept by in the ledger: its key as text; `hex:` and its bytes when not UTF-8 or
    /// holding NUL (which PostgreSQL text cannot); `sha256:` and its digest when longer than an index entry should
    /// be; nil when keyless.
    static func orderingKey(_ message: KafkaMessage) -> OrderingKey? {
        guard let key = message.key else { return nil }
        if key.count > 256 { return OrderingKey("sha256:" + sha256(key).lowercaseHex) }
        if !key.contains(0), !key.starts(with: "hex:".utf8), !key.starts(with: "sha256:".utf8), let text = String(validating: key, as: UTF8.self) {
            return OrderingKey(text)
        }
        return OrderingKey("hex:" + key.lowercaseHex)
    }
}

/// The kind of `OrderingKey`s.
public enum MessageKeys {}

/// The text a message's order is kept by (`ParkedRecord.orderingKey`): its Kafka key, compared by its bytes as the
/// broker and the ledger compare it.
public typealias OrderingKey = Identifier<MessageKeys>

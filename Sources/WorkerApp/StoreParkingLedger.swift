import Database
import Foundation
import PurchaseDomain
import PurchaseStore
import WorkerRuntime

/// The runners' parking ledger: the messages each stage parked on the retry topic and has not re-driven yet. Kept in the
/// purchase store's database (table `parked_messages`), not in a process, so that whichever replica owns a partition
/// after a rebalance or a restart holds a key's later messages behind its parked one, and so that of several records of
/// one parked message on the retry topic (a crash between publishing one and committing the other) only the current one
/// is handled. A parked message is named by its stage and its coordinates on the input topic.
public struct StoreParkingLedger: ParkingLedger {
    let store: SQLPurchaseStore

    public init(store: SQLPurchaseStore) { self.store = store }

    /// Records the message as parked by the retry topic's record `token`, under `key` (nil: nothing waits behind it); for
    /// a message parked before, the record, key and kind are replaced and the time it was first parked stays.
    public func recordParked(_ origin: ParkedOrigin, key: OrderingKey?, recheck: Bool, token: String, reason: String, at: Date) async throws {
        _ = try await store.withConnection { connection, _ in
            try connection.query("""
                INSERT INTO parked_messages (stage, origin_topic, origin_partition, origin_offset, message_key, recheck, token, reason, parked_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                ON CONFLICT (stage, origin_topic, origin_partition, origin_offset) DO UPDATE
                SET message_key = excluded.message_key, recheck = excluded.recheck, token = excluded.token, reason = excluded.reason
                """, Self.values(origin)
                    + [key.map { SQLValue.text($0.rawValue) } ?? .null, .integer(recheck ? 1 : 0), .text(token), .text(String(reason.prefix(2000))),
                       .integer(EpochMilliseconds.milliseconds(at))])
        }
    }

    /// The parked messages of `stage` with `key`, oldest first.
    public func parked(stage: String, key: OrderingKey) async throws -> [ParkedOrigin] {
        try await store.withConnection { connection, _ in
            try connection.query("""
                SELECT origin_topic, origin_partition, origin_offset FROM parked_messages WHERE stage = $1 AND message_key = $2
                ORDER BY parked_at, origin_offset
                """, [.text(stage), .text(key.rawValue)]).compactMap { row in
                guard let topic = row[0].string, let partition = row[1].int64, let offset = row[2].int64 else { return nil }
                return ParkedOrigin(stage: stage, topic: topic, partition: Int32(truncatingIfNeeded: partition), offset: offset)
            }
        }
    }

    /// Which of `keys` have a message of `stage` parked and not re-driven yet: one look for a batch of messages. Keys are
    /// compared by their bytes, as the database compares them.
    public func parkedKeys(stage: String, among keys: Set<OrderingKey>) async throws -> Set<OrderingKey> {
        guard !keys.isEmpty else { return [] }
        let tuples = keys.sorted().map { [stage, $0.rawValue] }
        return try await store.withConnection { connection, keySets in
            var parked = Set<OrderingKey>()
            try keySets.matching(["stage", "message_key"], tuples, firstParameter: 1) { condition, values in
                for row in try connection.query("SELECT DISTINCT message_key FROM parked_messages WHERE \(condition)", values) {
                    if let key = row[0].string { parked.insert(OrderingKey(key)) }
                }
            }
            return parked
        }
    }

    /// The token of the message's current record on the retry topic; nil when it is not parked (any more).
    public func parkedToken(_ origin: ParkedOrigin) async throws -> String? {
        try await store.withConnection { connection, _ in
            try connection.query("""
                SELECT token FROM parked_messages WHERE stage = $1 AND origin_topic = $2 AND origin_partition = $3 AND origin_offset = $4
                """, Self.values(origin)).first?[0].string
        }
    }

    /// Forgets the message: it was re-driven (done or dead-lettered), so its key's later messages may go on.
    public func releaseParked(_ origin: ParkedOrigin) async throws {
        _ = try await store.withConnection { connection, _ in
            try connection.query("""
                DELETE FROM parked_messages WHERE stage = $1 AND origin_topic = $2 AND origin_partition = $3 AND origin_offset = $4
                """, Self.values(origin))
        }
    }

    /// Messages parked because they kept failing (not re-checks), per stage, and when the oldest of each was parked.
    public func parkedByStage() async throws -> [String: (count: Int, oldest: Date)] {
        try await store.withConnection { connection, _ in
            var stages: [String: (count: Int, oldest: Date)] = [:]
            for row in try connection.query("SELECT stage, count(*), min(parked_at) FROM parked_messages WHERE recheck = 0 GROUP BY stage") {
                if let stage = row[0].string, let count = row[1].int64, let oldest = row[2].int64.flatMap(EpochMilliseconds.date) {
                    stages[stage] = (Int(count), oldest)
                }
            }
            return stages
        }
    }

    private static func values(_ origin: ParkedOrigin) -> [SQLValue] {
        [.text(origin.stage), .text(origin.topic), .integer(Int64(origin.partition)), .integer(origin.offset)]
    }
}

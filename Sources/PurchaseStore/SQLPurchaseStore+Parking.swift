import Database
import Foundation

/// The messages each stage parked on the retry topic and has not re-driven yet (the runner's parking ledger).
/// Kept in the store, not in a process, so that whichever replica owns a partition after a rebalance or a restart
/// holds a key's later messages behind its parked one, and so that of several records of one parked message on the
/// retry topic (a crash between publishing one and committing the other) only the current one is handled.
/// A parked message is named by its stage and its coordinates on the input topic.
extension SQLPurchaseStore {
    /// Records the message as parked by the retry topic's record `token`, under `key` (nil: nothing waits behind it);
    /// for a message parked before, the record, key and kind are replaced and the time it was first parked stays.
    public func recordParked(stage: String, topic: String, partition: Int32, offset: Int64, key: String?, recheck: Bool, token: String,
                             reason: String, at: Date) async throws {
        _ = try await executor.run { connection in
            try connection.query("""
                INSERT INTO parked_messages (stage, origin_topic, origin_partition, origin_offset, message_key, recheck, token, reason, parked_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                ON CONFLICT (stage, origin_topic, origin_partition, origin_offset) DO UPDATE
                SET message_key = excluded.message_key, recheck = excluded.recheck, token = excluded.token, reason = excluded.reason
                """, Self.origin(stage, topic, partition, offset)
                    + [key.map(SQLValue.text) ?? .null, .integer(recheck ? 1 : 0), .text(token), .text(String(reason.prefix(2000))),
                       .integer(PurchaseTime.milliseconds(at))])
        }
    }

    /// The coordinates of the parked messages of `stage` with `key`, oldest first.
    public func parkedMessages(stage: String, key: String) async throws -> [(topic: String, partition: Int32, offset: Int64)] {
        try await executor.run { connection in
            try connection.query("""
                SELECT origin_topic, origin_partition, origin_offset FROM parked_messages WHERE stage = $1 AND message_key = $2
                ORDER BY parked_at, origin_offset
                """, [.text(stage), .text(key)]).compactMap { row in
                guard let topic = row[0].string, let partition = row[1].int64, let offset = row[2].int64 else { return nil }
                return (topic, Int32(truncatingIfNeeded: partition), offset)
            }
        }
    }

    /// Which of `keys` have a message of `stage` parked and not re-driven yet: one look for a batch of messages (see
    /// `matching`).
    /// `keys` and the keys answered are text as the ledger keeps it (the caller compares them by their bytes).
    public func parkedKeys(stage: String, among keys: [String]) async throws -> [String] {
        guard !keys.isEmpty else { return [] }
        let dialect = dialect
        return try await executor.run { connection in
            var parked: [String] = []
            try Self.matching(["stage", "message_key"], keys.map { [stage, $0] }, firstParameter: 1, dialect) { condition, values in
                for row in try connection.query("SELECT DISTINCT message_key FROM parked_messages WHERE \(condition)", values) {
                    if let key = row[0].string { parked.append(key) }
                }
            }
            return parked
        }
    }

    /// The token of the message's current record on the retry topic; nil when it is not parked (any more).
    public func parkedToken(stage: String, topic: String, partition: Int32, offset: Int64) async throws -> String? {
        try await executor.run { connection in
            try connection.query("""
                SELECT token FROM parked_messages WHERE stage = $1 AND origin_topic = $2 AND origin_partition = $3 AND origin_offset = $4
                """, Self.origin(stage, topic, partition, offset)).first?[0].string
        }
    }

    /// Forgets the message: it was re-driven (done or dead-lettered), so its key's later messages may go on.
    public func releaseParked(stage: String, topic: String, partition: Int32, offset: Int64) async throws {
        _ = try await executor.run { connection in
            try connection.query("""
                DELETE FROM parked_messages WHERE stage = $1 AND origin_topic = $2 AND origin_partition = $3 AND origin_offset = $4
                """, Self.origin(stage, topic, partition, offset))
        }
    }

    /// Messages parked because they kept failing (not re-checks), per stage, and when the oldest of each was parked.
    public func parkedByStage() async throws -> [String: (count: Int, oldest: Date)] {
        try await executor.run { connection in
            var stages: [String: (count: Int, oldest: Date)] = [:]
            for row in try connection.query("SELECT stage, count(*), min(parked_at) FROM parked_messages WHERE recheck = 0 GROUP BY stage") {
                if let stage = row[0].string, let count = row[1].int64, let oldest = row[2].int64 {
                    stages[stage] = (Int(count), PurchaseTime.date(oldest))
                }
            }
            return stages
        }
    }

    private static func origin(_ stage: String, _ topic: String, _ partition: Int32, _ offset: Int64) -> [SQLValue] {
        [.text(stage), .text(topic), .integer(Int64(partition)), .integer(offset)]
    }
}

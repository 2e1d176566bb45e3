import Database
import Foundation

/// The messages each stage parked on the retry topic and has not re-driven yet (the runner's parking ledger).
/// Kept in the store, not in a process, so that whichever replica owns a partition after a rebalance or a restart
/// holds a key's later messages behind its parked one, and so that a parked record re-driven twice is handled once.
/// A parked message is named by its stage and its coordinates on the input topic.
extension SQLPurchaseStore {
    /// Records the message as parked under `key` (nil: keyless, nothing waits behind it); a repeat changes nothing.
    public func recordParked(stage: String, topic: String, partition: Int32, offset: Int64, key: String?, reason: String, at: Date) async throws {
        _ = try await executor.run { connection in
            try connection.query("""
                INSERT INTO parked_messages (stage, origin_topic, origin_partition, origin_offset, message_key, reason, parked_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING
                """, Self.origin(stage, topic, partition, offset)
                    + [key.map(SQLValue.text) ?? .null, .text(String(reason.prefix(2000))), .integer(PurchaseTime.milliseconds(at))])
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

    /// Whether the message is parked and not yet re-driven.
    public func isParked(stage: String, topic: String, partition: Int32, offset: Int64) async throws -> Bool {
        try await executor.run { connection in
            !(try connection.query("""
                SELECT 1 FROM parked_messages WHERE stage = $1 AND origin_topic = $2 AND origin_partition = $3 AND origin_offset = $4
                """, Self.origin(stage, topic, partition, offset)).isEmpty)
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

    /// Parked messages per stage, and when the oldest of each was parked.
    public func parkedByStage() async throws -> [String: (count: Int, oldest: Date)] {
        try await executor.run { connection in
            var stages: [String: (count: Int, oldest: Date)] = [:]
            for row in try connection.query("SELECT stage, count(*), min(parked_at) FROM parked_messages GROUP BY stage") {
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

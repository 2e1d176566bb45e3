import Database
import Foundation
import Kafka
import PurchaseDomain
import PurchaseStore
import WorkerRuntime

/// The runners' in-flight marks (table `in_flight_marks`), kept in the purchase store's database beside the parking
/// ledger, so that whichever replica holds a partition after a crash finds what was in hand (see `InFlightLedger`).
public struct StoreInFlightLedger: InFlightLedger {
    let store: SQLPurchaseStore

    public init(store: SQLPurchaseStore) { self.store = store }

    public func mark(stage: String, partition: TopicPartition) async throws -> InFlightMark? {
        try await store.withConnection { connection, _ in
            guard let row = try connection.query("""
                SELECT handling_first, handling_last, suspect_first, suspect_last, culprits FROM in_flight_marks
                WHERE stage = $1 AND topic = $2 AND topic_partition = $3
                """, Self.key(stage, partition)).first else { return nil }
            func range(_ first: SQLValue, _ last: SQLValue) -> ClosedRange<Int64>? {
                guard let first = first.int64, let last = last.int64, first <= last else { return nil }
                return first...last
            }
            return InFlightMark(handling: range(row[0], row[1]), suspect: range(row[2], row[3]), culprits: Self.culprits(row[4]))
        }
    }

    public func setMark(_ mark: InFlightMark, stage: String, partition: TopicPartition) async throws {
        let values = Self.key(stage, partition) + Self.columns(mark) + [Self.now()]
        _ = try await store.withConnection { connection, _ in
            try connection.query("""
                INSERT INTO in_flight_marks (stage, topic, topic_partition, handling_first, handling_last, suspect_first, suspect_last, culprits, marked_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                ON CONFLICT (stage, topic, topic_partition) DO UPDATE
                SET handling_first = excluded.handling_first, handling_last = excluded.handling_last,
                    suspect_first = excluded.suspect_first, suspect_last = excluded.suspect_last, culprits = excluded.culprits,
                    marked_at = excluded.marked_at
                """, values)
        }
    }

    public func replaceMark(_ held: InFlightMark, with mark: InFlightMark, stage: String, partition: TopicPartition) async throws {
        // Null-safe comparisons (SQLite 3.39 and PostgreSQL both say IS NOT DISTINCT FROM): a mark with nothing in hand holds nulls.
        let values = Self.key(stage, partition) + Self.columns(mark) + [Self.now()] + Self.columns(held)
        _ = try await store.withConnection { connection, _ in
            try connection.query("""
                UPDATE in_flight_marks
                SET handling_first = $4, handling_last = $5, suspect_first = $6, suspect_last = $7, culprits = $8, marked_at = $9
                WHERE stage = $1 AND topic = $2 AND topic_partition = $3
                  AND handling_first IS NOT DISTINCT FROM $10 AND handling_last IS NOT DISTINCT FROM $11
                  AND suspect_first IS NOT DISTINCT FROM $12 AND suspect_last IS NOT DISTINCT FROM $13 AND culprits = $14
                """, values)
        }
    }

    /// A mark's columns after the key: `handling_first` to `culprits`.
    private static func columns(_ mark: InFlightMark) -> [SQLValue] {
        func bounds(_ range: ClosedRange<Int64>?) -> [SQLValue] {
            range.map { [.integer($0.lowerBound), .integer($0.upperBound)] } ?? [.null, .null]
        }
        return bounds(mark.handling) + bounds(mark.suspect) + [.text(mark.culprits.map(String.init).joined(separator: ","))]
    }

    /// The culprits a `culprits` column holds (offsets, comma-separated); what is not an offset is left out.
    private static func culprits(_ value: SQLValue) -> [Int64] {
        guard case .text(let text) = value else { return [] }
        return text.split(separator: ",").compactMap { Int64($0) }
    }

    /// `marked_at`.
    private static func now() -> SQLValue { .integer(EpochMilliseconds.milliseconds(.now)) }

    private static func key(_ stage: String, _ partition: TopicPartition) -> [SQLValue] {
        [.text(stage), .text(partition.topic), .integer(Int64(partition.partition))]
    }
}

import Database
import Foundation
import PurchaseDomain

/// What reconciliation passes keep: the notifications handled, and each history's checkpoint under a lease.
extension SQLPurchaseStore: ReconciliationRepository {
    public func recordNotificationSeen(_ id: NotificationID, type: String, at now: Date) async throws {
        // Another table than the purchases': neither what the batch read ahead nor its deferred writes are concerned.
        _ = try await executor.run(usingReadAhead: true, inCallingTask: true) { connection in
            try connection.query("""
                INSERT INTO notifications_seen (notification_uuid, notification_type, seen_at) VALUES ($1, $2, $3)
                ON CONFLICT (notification_uuid) DO NOTHING
                """, [.text(id), .text(String(type.prefix(64))), .integer(PurchaseTime.milliseconds(now))])
        }
    }

    public func unseenNotifications(_ ids: [NotificationID]) async throws -> Set<NotificationID> {
        guard !ids.isEmpty else { return [] }
        let dialect = dialect
        let seen = try await executor.run { connection in
            var seen: Set<NotificationID> = []
            try Self.matching(["notification_uuid"], ids.map { [$0.rawValue] }, firstParameter: 1, dialect) { condition, values in
                for row in try connection.query("SELECT notification_uuid FROM notifications_seen WHERE \(condition)", values) {
                    if let id: NotificationID = row[0].identifier() { seen.insert(id) }
                }
            }
            return seen
        }
        return Set(ids).subtracting(seen)
    }

    public func pruneSeenNotifications(before date: Date) async throws -> Int {
        try await executor.run { connection in
            try connection.query("DELETE FROM notifications_seen WHERE seen_at < $1 RETURNING notification_uuid",
                                 [.integer(PurchaseTime.milliseconds(date))]).count
        }
    }

    public func claimCheckpoint(_ name: String, owner: String, until leaseUntil: Date, now: Date) async throws -> CheckpointClaim {
        let dialect = dialect
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                let (at, until) = (PurchaseTime.milliseconds(now), PurchaseTime.milliseconds(leaseUntil))
                // Taken when new, already this owner's, released, or its lease ran out.
                let taken = try connection.query("""
                    INSERT INTO reconciliation_checkpoints (name, position, lease_owner, lease_until, updated_at) VALUES ($1, NULL, $2, $3, $4)
                    ON CONFLICT (name) DO UPDATE SET lease_owner = excluded.lease_owner, lease_until = excluded.lease_until, updated_at = excluded.updated_at
                    WHERE reconciliation_checkpoints.lease_owner IS NULL OR reconciliation_checkpoints.lease_owner = excluded.lease_owner
                        OR reconciliation_checkpoints.lease_until <= excluded.updated_at
                    RETURNING position
                    """, [.text(name), .text(owner), .integer(until), .integer(at)])
                if let row = taken.first { return .claimed(position: row[0].int64.map(PurchaseTime.date)) }
                let held = try connection.query("SELECT lease_owner, lease_until FROM reconciliation_checkpoints WHERE name = $1", [.text(name)]).first
                return .heldByAnother(owner: held?[0].string ?? "", until: PurchaseTime.date(held?[1].int64 ?? at))
            }
        }
    }

    public func advanceCheckpoint(_ name: String, owner: String, to position: Date, now: Date) async throws -> Bool {
        try await executor.run { connection in
            !(try connection.query("""
                UPDATE reconciliation_checkpoints SET position = $3, updated_at = $4
                WHERE name = $1 AND lease_owner = $2 AND lease_until > $4 AND (position IS NULL OR position <= $3) RETURNING name
                """, [.text(name), .text(owner), .integer(PurchaseTime.milliseconds(position)), .integer(PurchaseTime.milliseconds(now))]).isEmpty)
        }
    }

    public func holdCheckpoint(_ name: String, until notBefore: Date, now: Date) async throws {
        _ = try await executor.run { connection in
            try connection.query("""
                INSERT INTO reconciliation_checkpoints (name, position, lease_owner, lease_until, updated_at, not_before) VALUES ($1, NULL, NULL, 0, $2, $3)
                ON CONFLICT (name) DO UPDATE SET not_before = excluded.not_before, updated_at = excluded.updated_at
                WHERE reconciliation_checkpoints.not_before IS NULL OR reconciliation_checkpoints.not_before < excluded.not_before
                """, [.text(name), .integer(PurchaseTime.milliseconds(now)), .integer(PurchaseTime.milliseconds(notBefore))])
        }
    }

    public func checkpointHeld(_ name: String) async throws -> Date? {
        try await executor.run { connection in
            try connection.query("SELECT not_before FROM reconciliation_checkpoints WHERE name = $1", [.text(name)]).first?[0].int64.map(PurchaseTime.date)
        }
    }

    public func releaseCheckpoint(_ name: String, owner: String) async throws {
        _ = try await executor.run { connection in
            try connection.query("UPDATE reconciliation_checkpoints SET lease_owner = NULL, lease_until = 0 WHERE name = $1 AND lease_owner = $2",
                                 [.text(name), .text(owner)])
        }
    }
}

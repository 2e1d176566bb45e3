import Foundation
import PurchaseDomain

/// Reconciliation's checkpoints and the notifications handled, as `SQLPurchaseStore+Reconciliation` keeps them.
extension InMemoryPurchaseStore: ReconciliationRepository {
    public func recordNotificationSeen(_ id: NotificationID, type: String, at now: Date) async throws {
        try await withTables { tables in if tables.notificationsSeen[id] == nil { tables.notificationsSeen[id] = now.milliseconds } }
    }

    public func unseenNotifications(_ ids: [NotificationID]) async throws -> Set<NotificationID> {
        try await withTables { tables in Set(ids.filter { tables.notificationsSeen[$0] == nil }) }
    }

    public func pruneSeenNotifications(before date: Date) async throws -> Int {
        try await withTables { tables in
            let old = tables.notificationsSeen.filter { $0.value < date.milliseconds }.map(\.key)
            for id in old { tables.notificationsSeen[id] = nil }
            return old.count
        }
    }

    public func claimCheckpoint(_ name: String, owner: String, until leaseUntil: Date, now: Date) async throws -> CheckpointClaim {
        try await withTables { tables in
            let existing = tables.checkpoints[name]
            if let existing, let holder = existing.leaseOwner, holder != owner, existing.leaseUntil > now.milliseconds {
                return .heldByAnother(owner: holder, until: Date(milliseconds: existing.leaseUntil))
            }
            tables.checkpoints[name] = Checkpoint(position: existing?.position, leaseOwner: owner, leaseUntil: leaseUntil.milliseconds,
                                                  notBefore: existing?.notBefore)
            return .claimed(position: existing?.position.map(Date.init(milliseconds:)))
        }
    }

    public func advanceCheckpoint(_ name: String, owner: String, to position: Date, now: Date) async throws -> Bool {
        try await withTables { tables in
            guard let checkpoint = tables.checkpoints[name], checkpoint.leaseOwner == owner, checkpoint.leaseUntil > now.milliseconds,
                  (checkpoint.position ?? .min) <= position.milliseconds else { return false }
            tables.checkpoints[name]?.position = position.milliseconds
            return true
        }
    }

    public func holdCheckpoint(_ name: String, until notBefore: Date, now: Date) async throws {
        try await withTables { tables in
            var checkpoint = tables.checkpoints[name] ?? Checkpoint(position: nil, leaseOwner: nil, leaseUntil: 0)
            checkpoint.notBefore = max(checkpoint.notBefore ?? .min, notBefore.milliseconds)
            tables.checkpoints[name] = checkpoint
        }
    }

    public func checkpointHeld(_ name: String) async throws -> Date? {
        try await withTables { tables in tables.checkpoints[name]?.notBefore.map(Date.init(milliseconds:)) }
    }

    public func releaseCheckpoint(_ name: String, owner: String) async throws {
        try await withTables { tables in
            guard tables.checkpoints[name]?.leaseOwner == owner else { return }
            tables.checkpoints[name]?.leaseOwner = nil
            tables.checkpoints[name]?.leaseUntil = 0
        }
    }
}

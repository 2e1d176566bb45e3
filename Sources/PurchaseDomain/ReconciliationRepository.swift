import Foundation

/// What a reconciliation pass keeps between passes and shares between replicas: per history it pages (a store and an
/// environment), how far it has read, under a lease so that one replica at a time reads it; and which notifications
/// the pipeline has already handled.
public protocol ReconciliationRepository: Sendable {
    /// Takes the checkpoint `name` for `owner` until `leaseUntil`, unless another owner's lease still runs at `now`.
    func claimCheckpoint(_ name: String, owner: String, until leaseUntil: Date, now: Date) async throws -> CheckpointClaim
    /// Moves the checkpoint forward to `position` while `owner` holds it; false (nothing moved) when the lease was lost or
    /// the checkpoint is further already.
    func advanceCheckpoint(_ name: String, owner: String, to position: Date, now: Date) async throws -> Bool
    /// Gives the lease up, so that another replica may take the next pass at once.
    func releaseCheckpoint(_ name: String, owner: String) async throws
    /// The store's API asked to wait (`Retry-After`): no pass reads the history of checkpoint `name` before `notBefore`
    /// (to the millisecond), whichever replica or process makes it (a following `--once` run too). A later time stands.
    func holdCheckpoint(_ name: String, until notBefore: Date, now: Date) async throws
    /// Until when the history of checkpoint `name` is not to be read (`holdCheckpoint`); nil: it may be read.
    func checkpointHeld(_ name: String) async throws -> Date?
    /// Records `id` handled (as `PurchaseRepository.recordNotificationSeen`): what a reconciliation pass publishes and no
    /// stage records.
    func recordNotificationSeen(_ id: NotificationID, type: String, at now: Date) async throws
    /// Those of `ids` the pipeline has not handled (see `recordNotificationSeen`).
    func unseenNotifications(_ ids: [NotificationID]) async throws -> Set<NotificationID>
    /// Forgets handled notifications seen before `date` (older than any history the store still keeps); how many.
    func pruneSeenNotifications(before date: Date) async throws -> Int
}

/// The answer to a claim of a checkpoint.
public enum CheckpointClaim: Sendable, Equatable {
    /// Taken: read from `position` (nil: never read yet).
    case claimed(position: Date?)
    /// Another replica holds it until `until`.
    case heldByAnother(owner: String, until: Date)
}

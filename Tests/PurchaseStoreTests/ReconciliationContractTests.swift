import Foundation
import PurchaseDomain
import Testing

/// Reconciliation's state on every repository: a history's checkpoint is read by one holder of its lease at a time and
/// only moves forward; handled notifications are told from the others by their bytes, and forgotten once old.
@Suite struct ReconciliationContractTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_700_000)

    @Test(arguments: RepositoryKind.available) func oneReplicaAtATimeHoldsACheckpoint(_ kind: RepositoryKind) async throws {
        let handles = try await kind.handles(2)
        let (a, b) = (handles[0], handles[1])
        let name = "appstore.notifications.Production"
        #expect(try await a.claimCheckpoint(name, owner: "a", until: Self.t0.addingTimeInterval(600), now: Self.t0) == .claimed(position: nil))
        #expect(try await b.claimCheckpoint(name, owner: "b", until: Self.t0.addingTimeInterval(660), now: Self.t0.addingTimeInterval(60))
                == .heldByAnother(owner: "a", until: Self.t0.addingTimeInterval(600)))
        #expect(try await a.claimCheckpoint(name, owner: "a", until: Self.t0.addingTimeInterval(900), now: Self.t0.addingTimeInterval(60))
                == .claimed(position: nil), "its holder renews it")
        #expect(try await b.advanceCheckpoint(name, owner: "b", to: Self.t0, now: Self.t0.addingTimeInterval(60)) == false, "not b's to move")
        #expect(try await a.advanceCheckpoint(name, owner: "a", to: Self.t0.addingTimeInterval(30), now: Self.t0.addingTimeInterval(60)))
        #expect(try await a.advanceCheckpoint(name, owner: "a", to: Self.t0, now: Self.t0.addingTimeInterval(60)) == false, "never backwards")

        // Released: the other takes it at once, from where the first left it.
        try await a.releaseCheckpoint(name, owner: "a")
        #expect(try await b.claimCheckpoint(name, owner: "b", until: Self.t0.addingTimeInterval(700), now: Self.t0.addingTimeInterval(100))
                == .claimed(position: Self.t0.addingTimeInterval(30)))
        // A lease that ran out is anyone's; its holder can no longer move it.
        let later = Self.t0.addingTimeInterval(701)
        #expect(try await b.advanceCheckpoint(name, owner: "b", to: later, now: later) == false, "the lease ran out")
        #expect(try await a.claimCheckpoint(name, owner: "a", until: later.addingTimeInterval(600), now: later)
                == .claimed(position: Self.t0.addingTimeInterval(30)))
        #expect(try await a.claimCheckpoint("appstore.notifications.Sandbox", owner: "a", until: later.addingTimeInterval(600), now: later)
                == .claimed(position: nil), "each history has its own")
    }

    @Test(arguments: RepositoryKind.available) func handledNotificationsAreToldApartByTheirBytes(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let composed = NotificationID("caf\u{E9}-0001"), decomposed = NotificationID("cafe\u{301}-0001")
        try await store.recordNotificationSeen(composed, type: "REFUND", at: Self.t0)
        try await store.recordNotificationSeen(composed, type: "REFUND", at: Self.t0.addingTimeInterval(5)) // a repeat changes nothing
        try await store.recordNotificationSeen("old", type: "DID_RENEW", at: Self.t0.addingTimeInterval(-200 * 86_400))
        #expect(try await store.unseenNotifications([composed, decomposed, "old", "never"]) == [decomposed, "never"])
        #expect(try await store.unseenNotifications([]) == [])
        #expect(try await store.pruneSeenNotifications(before: Self.t0.addingTimeInterval(-190 * 86_400)) == 1)
        #expect(try await store.unseenNotifications([composed, "old"]) == ["old"])
    }

    /// A wait the store's API asked of a history is kept to the millisecond, whether or not the checkpoint existed, through
    /// claims and releases; a shorter one asked later does not shorten it.
    @Test(arguments: RepositoryKind.available) func aHeldCheckpointKeepsItsWaitToTheMillisecond(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let name = "googleplay.voided.com.example.coins"
        #expect(try await store.checkpointHeld(name) == nil)
        try await store.holdCheckpoint(name, until: Self.t0.addingTimeInterval(1.5), now: Self.t0)
        #expect(try await store.checkpointHeld(name) == Self.t0.addingTimeInterval(1.5))
        #expect(try await store.claimCheckpoint(name, owner: "a", until: Self.t0.addingTimeInterval(60), now: Self.t0) == .claimed(position: nil))
        try await store.holdCheckpoint(name, until: Self.t0.addingTimeInterval(0.25), now: Self.t0)
        try await store.releaseCheckpoint(name, owner: "a")
        #expect(try await store.checkpointHeld(name) == Self.t0.addingTimeInterval(1.5), "the longer wait stands")
        try await store.holdCheckpoint(name, until: Self.t0.addingTimeInterval(120.125), now: Self.t0)
        #expect(try await store.checkpointHeld(name) == Self.t0.addingTimeInterval(120.125))
        #expect(try await store.checkpointHeld("appstore.notifications.Production") == nil, "each history has its own")
    }
}

import JSON
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StoreFixtures

/// The App Store notifications of a chaos run as the store keeps them: every one in its history (a stand-in App Store
/// Server API), and a share of them (`--lose-notifications`, spread evenly) never delivered to the pipeline, as when its
/// webhook is down; the sweeper's reconciliation reads them back from the history.
struct LostNotifications {
    let share: Double
    /// Every notification the store sent, and those of them lost.
    private(set) var sent: [NotificationID] = []
    private(set) var lost: [NotificationID] = []

    init(share: Double) { self.share = share }

    /// Puts `notification` in the store's history; whether it is also delivered.
    mutating func delivers(_ notification: StoreNotificationReceived, to history: AppStoreServerAPIStandIn) -> Bool {
        history.recordNotification(notification.content, at: notification.receivedAt)
        guard let id = notification.notificationID else { return true }
        let index = sent.count
        sent.append(id)
        guard spreadEvenly(index, share: share) else { return true }
        lost.append(id)
        return false
    }

    /// Those of all the store sent (delivered, or lost and published by the reconciliation) that the verifier has not
    /// handled: what another pass over the history would publish.
    func unhandled(by store: SQLPurchaseStore) async throws -> Int { try await store.unseenNotifications(sent).count }

    var summary: JSONValue { .object(["sent": .integer(Int64(sent.count)), "lost": .integer(Int64(lost.count))]) }
}

/// Whether the `index`th (from 0) of a sequence is among an evenly spread `share` of it: it is when the share of the
/// first `index` + 1 reaches a new whole one, so that exactly that share of any prefix is chosen.
func spreadEvenly(_ index: Int, share: Double) -> Bool {
    ((Double(index) + 1) * share).rounded(.down) > (Double(index) * share).rounded(.down)
}

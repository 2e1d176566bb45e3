import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// The status of a subscription, from the renewal info of any notification that carries one (a renewal turned off or on,
/// a downgrade, a failed renewal and its grace period, a price increase, an expiry, a renewal, an offer): recorded in the
/// batch's transaction with what else the notification leads to, and announced (`subscription.status`) when it changed.
/// Information signed earlier than what is recorded changes nothing (`SubscriptionStatus.update`).
extension VerifierStage {
    /// Records the status `notification` tells, after what else it led to (so that a charge it recorded names the owner);
    /// the announcement of it when it changed.
    func announceSubscriptionStatus(of notification: AppStoreNotification) async throws -> [KafkaProducerMessage] {
        guard let status = notification.subscriptionStatus else { return [] }
        // A change, or the repeat of one (a redelivery after the commit, its announcement maybe never acknowledged: same id).
        guard let (standing, fields) = try await store.recordSubscriptionStatus(status).announcement else { return [] }
        let owner = try await store.owner(store: standing.store, originalTransactionId: standing.originalTransactionId)
        let event = SubscriptionStatusChanged(standing, userId: owner, changed: fields, notificationType: String(notification.notificationType.rawValue.prefix(64)),
                                              notificationSubtype: notification.subtype.map { String($0.prefix(64)) }, announcedAt: context.now())
        guard let message = context.conformingMessage(event) else {
            // Recorded all the same (the read side answers it); what the store sent does not fit the event (an id's length).
            context.logger.warning("subscription status not announced: it does not fit the event schema",
                                   ["originalTransactionId": standing.originalTransactionId])
            return []
        }
        return [message]
    }
}

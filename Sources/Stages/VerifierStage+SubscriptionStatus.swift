import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// The status of a subscription, from the renewal info of any App Store notification that carries one (a renewal turned
/// off or on, a downgrade, a failed renewal and its grace period, a price increase, an expiry, a renewal, an offer), and
/// from every `subscriptionsv2` answer Google Play gives (a submission's or a notification's): recorded in the batch's
/// transaction with what else it leads to, and announced (`subscription.status`) when it changed.
/// Information signed earlier than what is recorded changes nothing (`SubscriptionStatus.update`).
extension VerifierStage {
    /// Records the status `notification` tells, after what else it led to (so that a charge it recorded names the owner);
    /// the announcement of it when it changed.
    func announceSubscriptionStatus(of notification: AppStoreNotification) async throws -> [KafkaProducerMessage] {
        guard let status = notification.subscriptionStatus else { return [] }
        // Both within the schema's 64 characters, without control characters: `SignedDataVerifier` refuses any other.
        return try await announce(status, notificationType: notification.notificationType.rawValue, notificationSubtype: notification.subtype)
    }

    /// Records the status a Google Play subscription's `subscriptionsv2` answer tells, as of now (Google signs no time):
    /// read for a submission or a notification (`notificationType`), after the purchase was recorded; the announcement
    /// of it when it changed. Nothing for any other purchase.
    func announceSubscriptionStatus(of purchase: VerifiedPurchase, notificationType: String? = nil) async throws -> [KafkaProducerMessage] {
        guard let status = SubscriptionStatus(googlePlaySubscription: purchase, asOf: context.now()) else { return [] }
        return try await announce(status, notificationType: notificationType, notificationSubtype: nil)
    }

    private func announce(_ status: SubscriptionStatus, notificationType: String?, notificationSubtype: String?) async throws -> [KafkaProducerMessage] {
        // A change, or the repeat of one (a redelivery after the commit, its announcement maybe never acknowledged: same id).
        guard let (standing, fields) = try await store.recordSubscriptionStatus(status).announcement else { return [] }
        let owner = try await store.owner(store: standing.store, originalTransactionId: standing.originalTransactionId)
        let event = SubscriptionStatusChanged(standing, userId: owner, changed: fields, notificationType: notificationType,
                                              notificationSubtype: notificationSubtype, announcedAt: context.now())
        guard let message = context.conformingMessage(event) else {
            // Recorded all the same (the read side answers it); what the store sent does not fit the event (an id's length).
            context.logger.warning("subscription status not announced: it does not fit the event schema",
                                   ["originalTransactionId": standing.originalTransactionId])
            return []
        }
        return [message]
    }
}

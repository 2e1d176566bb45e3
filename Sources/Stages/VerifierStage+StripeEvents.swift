import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

/// `store.notification` of Stripe: a webhook's event (or the same event read back by reconciliation), whose signature
/// the ingest checked.
extension VerifierStage {
    func handleStripe(_ received: StoreNotificationReceived) async throws -> StageResult {
        guard stripe != nil else { return .deadLetter(reason: "notificationRejected", detail: Self.notConfigured(.stripe).detail) }
        return .deadLetter(reason: "notificationRejected", detail: "Stripe events are not handled yet")
    }
}

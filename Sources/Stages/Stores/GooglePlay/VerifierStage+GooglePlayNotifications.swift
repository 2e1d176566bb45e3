import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

/// `store.notification` from Google Play: a real-time developer notification the ingest authenticated, only a hint of
/// what happened to which purchase. The purchase is read again from the Android Publisher API and judged by that: a
/// subscription's new period (a signup, a renewal, a recovery, a restart) is recorded for the subscription's owner like a
/// submission, or kept unclaimed for the app's; a one-time purchase likewise; a voided order is revoked (once, with the
/// voided-purchases list); a test notification is logged. Notifications of one purchase share a partition (their key is
/// its token), so they are handled in order.
extension VerifierStage {
    func handleGooglePlay(_ received: StoreNotificationReceived) async throws -> StageResult {
        guard let text = received.developerNotification, let notification = GooglePlayDeveloperNotification(json: text) else {
            return .deadLetter(reason: "notificationRejected", detail: "not a Google Play DeveloperNotification naming its package and purchase")
        }
        guard let googlePlay = stores.googlePlay, googlePlay.configuration.apps[notification.packageName] != nil else {
            return .deadLetter(reason: "notificationRejected",
                               detail: "'\(notification.packageName.rawValue.prefix(256))' is not one of this deployment's Google Play apps")
        }
        var fields: [String: any Sendable] = ["package": notification.packageName]
        if let token = notification.purchaseToken { fields["token"] = Fingerprint(token) }
        context.logger.info("Google Play notification", fields)
        switch notification.kind {
        case .test:
            return .publish([])
        case .voided(_, nil, _):
            return .publish([]) // an order id is what the purchase is recorded by; the voided-purchases list names it
        case .voided(_, _, true):
            // A quantity-based partial refund: how many units, only the voided-purchases list says (`voidedQuantity`); the
            // reconciler's next pass revokes them. Not recorded as seen, so that the list's entry is published.
            return .publish([])
        case .voided(_, let orderId?, false):
            let entry = GooglePlayVoidedPurchasesHistory.revocation(packageName: notification.packageName, transactionId: orderId,
                                                                    voidedAt: notification.eventTime, at: context.now())
            if let id = entry.id { try await store.recordNotificationSeen(id, type: "googleplay.voided", at: context.now()) }
            return try context.messages([entry.event])
        case .oneTimeProduct(let type, _, _) where type != 1:
            return .publish([]) // a pending purchase canceled: nothing was paid
        case .oneTimeProduct(_, let token, let productId):
            let verdict = await googlePlay.verify(packageName: notification.packageName, productId: productId, purchaseToken: token)
            return try await recordGooglePlayCharge(verdict.map(VerifiedPurchase.init), notification, token, received: received)
        case .subscription(_, let token, let productId):
            // Without `subscriptionId` (deprecated by Google), the token alone: the answer names the product.
            let verdict = await googlePlay.verifySubscription(packageName: notification.packageName, productId: productId, purchaseToken: token)
            return try await recordGooglePlayCharge(verdict.map(VerifiedPurchase.init), notification, token, received: received)
        }
    }

    /// The purchase the API answered for a notification, recorded as the App Store's announced charges are
    /// (`recordAnnouncedCharge`). What the API cannot say now is retried; what it refuses (a token no longer valid, a
    /// pending payment) leaves nothing to do.
    private func recordGooglePlayCharge(_ verdict: Result<VerifiedPurchase, Rejection>, _ notification: GooglePlayDeveloperNotification,
                                        _ token: PurchaseToken, received: StoreNotificationReceived) async throws -> StageResult {
        let purchase: VerifiedPurchase
        switch verdict {
        case .success(let verified): purchase = try await continuingItsSubscription(verified)
        case .failure(let rejection) where rejection.reason == .purchasePending || !rejection.isRetryable:
            context.logger.info("Google Play notification: nothing to record", ["token": Fingerprint(token), "reason": rejection.reason.rawValue])
            return .publish([])
        case .failure(let rejection):
            throw TransientError("\(rejection)")
        }
        let recorded = try await recordAnnouncedCharge(purchase, announcedAs: "googleplay") { owner in
            // What `purchaseRecord` keeps to complete it with: the package and token (no signed data: the API was asked).
            PurchaseSubmitted(store: .googleplay, kind: .googlePlayPurchase,
                              googleplay: .init(packageName: notification.packageName, productId: purchase.productId, purchaseToken: token, purchaseData: "", signature: ""),
                              userId: owner, submittedAt: received.receivedAt, source: .server, submissionId: Self.announcedSubmissionId("googleplay:\(purchase.transactionId)"))
        }
        // A subscription's status, once its period is recorded (so that the announcement names the owner).
        guard case .subscription(let type, _, _) = notification.kind, case .publish(let messages) = recorded else { return recorded }
        return .publish(messages + (try await announceSubscriptionStatus(of: purchase, notificationType: GooglePlayDeveloperNotification.subscriptionTypeName(type))))
    }
}

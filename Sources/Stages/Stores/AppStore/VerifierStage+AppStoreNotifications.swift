import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

/// The App Store's notifications (App Store Server Notifications V2), verified against Apple's chain, each recorded as
/// handled and turned into what it means for the purchase it is about, and for the subscription's status
/// (`VerifierStage+SubscriptionStatus.swift`).
extension VerifierStage {
    func handleAppStore(_ received: StoreNotificationReceived) async throws -> StageResult {
        guard let appStore = stores.appStore else { return .deadLetter(reason: "notificationRejected", detail: StoreVerifiers.notConfigured(.appstore).detail) }
        guard let signedPayload = received.signedPayload else { return .deadLetter(reason: "notificationRejected", detail: "no signedPayload") }
        let notification: AppStoreNotification
        switch appStore.orInTheSandbox(appStore.signedData.verifyNotification(signedPayload), bundleId: \.bundleId, apps: apps, { $0.signedData.verifyNotification(signedPayload) }) {
        case .success(let value): notification = value
        case .failure(let rejection) where rejection.isRetryable: throw TransientError("\(rejection)")
        case .failure(let rejection): return .deadLetter(reason: "notificationRejected", detail: "\(rejection)")
        }
        context.logger.info("notification", ["type": notification.notificationType.rawValue, "action": notification.action.rawValue,
                                             "transactionId": notification.transaction?.transactionId ?? ""])
        // In the batch's transaction with what it leads to: a pass over the store's history then publishes it again only
        // if it never got here (handled again, it would change nothing, but would cost a verification).
        try await store.recordNotificationSeen(NotificationID(notification.notificationUUID), type: notification.notificationType.rawValue,
                                               at: context.now())
        let result = try await carryOut(notification, received: received)
        guard case .publish(let messages) = result else { return result }
        return .publish(messages + (try await announceSubscriptionStatus(of: notification)))
    }

    /// What the verified `notification` means for the purchase it is about.
    private func carryOut(_ notification: AppStoreNotification, received: StoreNotificationReceived) async throws -> StageResult {
        guard let transaction = notification.transaction else { return .publish([]) }
        let reason: PurchaseRevokedEvent.Reason
        switch notification.action {
        case .revokeGrant: reason = notification.notificationType == .revoke ? .REVOKE : .REFUND
        case .restoreGrant: reason = .REFUND_REVERSED
        case .endEntitlement: reason = notification.notificationType == .gracePeriodExpired ? .GRACE_PERIOD_EXPIRED : .EXPIRED
        case .recordPurchase: return try await recordCharge(transaction, notification: notification, received: received)
        case .extendIntoGracePeriod:
            // The period, signed again, until the grace period ends: its grant (or the repeat of it) extends it like
            // RENEWAL_EXTENDED, and GRACE_PERIOD_EXPIRED or the recovered renewal (DID_RENEW) ends or follows it.
            guard let info = notification.renewalInfo, info.originalTransactionId == (transaction.originalTransactionId ?? transaction.transactionId),
                  let graceEnd = info.gracePeriodExpiresDate else {
                context.logger.warning("grace period without its end in the renewal info; nothing extended", ["transactionId": transaction.transactionId])
                return .publish([])
            }
            var period = transaction
            period.expiresDate = max(graceEnd, transaction.expiresDate ?? graceEnd)
            return try await recordCharge(period, notification: notification, received: received)
        case .reportConsumption: return try await consumptionRequested(transaction, notification: notification)
        case .recordDecision, .acknowledgeTest, .logOnly: return .publish([])
        }
        let held = try await store.purchase(PurchaseKey(store: .appstore, transactionId: transaction.transactionId))
        return try context.messages([PurchaseRevokedEvent(
            store: .appstore, transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId, userId: held?.owner,
            productId: transaction.productId, reason: reason, revocationDate: transaction.revocationDate,
            refundShare: reason == .REFUND ? RefundShare.of(revocationType: transaction.revocationType, revocationPercentage: transaction.revocationPercentage) : nil,
            notificationUUID: notification.notificationUUID, decidedAt: notification.signedDate, revokedAt: context.now())])
    }

    /// CONSUMPTION_REQUEST: handed to the finisher, which answers with the App Store Server API (with the user's
    /// consent only) within the 12 hours Apple allows after it signed the notification.
    private func consumptionRequested(_ transaction: AppStoreTransaction, notification: AppStoreNotification) async throws -> StageResult {
        let held = try await store.purchase(PurchaseKey(store: .appstore, transactionId: transaction.transactionId))
        let requestedAt = notification.signedDate ?? context.now()
        return try context.messages([ConsumptionRequested(
            store: .appstore, transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId, userId: held?.owner,
            productId: transaction.productId, requestReason: notification.raw["data"]?.objectValue?["consumptionRequestReason"]?.stringValue.map { IdentifierRule.truncated($0, maxLength: 64) },
            ownershipType: transaction.inAppOwnershipType.map { IdentifierRule.truncated($0, maxLength: 64) }, notificationUUID: notification.notificationUUID,
            requestedAt: requestedAt, answerBy: requestedAt.addingTimeInterval(Self.consumptionAnswerWindow))])
    }

    /// How long Apple waits for the answer to a CONSUMPTION_REQUEST.
    static let consumptionAnswerWindow: TimeInterval = 12 * 3600

    /// A renewal, a new subscription or a one-time charge the App Store announces (`recordAnnouncedCharge`).
    private func recordCharge(_ transaction: AppStoreTransaction, notification: AppStoreNotification,
                              received: StoreNotificationReceived) async throws -> StageResult {
        try await recordAnnouncedCharge(VerifiedPurchase(transaction), announcedAs: notification.notificationType.rawValue) { owner in
            PurchaseSubmitted(store: .appstore, kind: .signedTransaction, userId: owner, submittedAt: received.receivedAt, source: .server,
                              submissionId: Self.announcedSubmissionId(notification.notificationUUID))
        }
    }
}

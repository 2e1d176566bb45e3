import Foundation
import Kafka
import PurchaseEvents
import PurchaseStore
import StoreVerification
import WorkerRuntime

/// `iap-verifier`: `purchase.submitted` → store verification → the purchase recorded → `purchase.verified`
/// or `purchase.rejected`; `store.notification` → verified notification → `purchase.revoked` for REFUND
/// and REVOKE (other types are logged and counted).
public struct VerifierStage: StoreBackedStage {
    public let name = "verifier"
    public let topics: [String]
    let context: StageContext
    let store: SQLPurchaseStore
    let appStore: SignedDataVerifier
    let receipts: ReceiptVerifier?
    let appCoins: AppCoinsVerifier?

    public init(context: StageContext, store: SQLPurchaseStore, appStore: SignedDataVerifier, receipts: ReceiptVerifier? = nil,
                appCoins: AppCoinsVerifier? = nil) {
        self.context = context
        self.store = store
        self.appStore = appStore
        self.receipts = receipts
        self.appCoins = appCoins
        self.topics = [context.codec.topic(.purchaseSubmitted), context.codec.topic(.storeNotification)]
    }

    public func handle(_ message: KafkaMessage) async throws -> StageResult {
        if message.topic == topics.last {
            switch context.codec.decode(message, as: StoreNotificationReceived.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let notification): return try await handle(notification)
            }
        }
        switch context.codec.decode(message, as: PurchaseSubmitted.self) {
        case .failure(let invalid): return context.deadLetter(invalid)
        case .success(let submission): return try await handle(submission)
        }
    }

    private func handle(_ submission: PurchaseSubmitted) async throws -> StageResult {
        let verified: Result<[VerifiedPurchase], Rejection>
        switch submission.kind {
        case .signedTransaction:
            verified = appStore.verifyTransaction(submission.signedTransaction ?? "").map { [VerifiedPurchase($0)] }
        case .appReceipt:
            guard let receipts else { return try rejected(submission, Rejection(.storeRejected, "app receipts are not configured"), transactionId: nil) }
            let environment = receipts.configuration.environment
            verified = receipts.verify(base64: submission.receipt ?? "").map { receipt in
                receipt.inAppPurchases.compactMap { VerifiedPurchase($0, in: receipt, environment: environment) }
            }
        case .appcoinsPurchase:
            guard let appCoins, let purchase = submission.appcoins else {
                return try rejected(submission, Rejection(.storeRejected, "AppCoins is not configured"), transactionId: nil)
            }
            verified = await appCoins.verify(packageName: purchase.packageName, sku: purchase.sku, purchaseToken: purchase.purchaseToken)
                .map { [VerifiedPurchase($0)] }
        }
        let purchases: [VerifiedPurchase]
        switch verified {
        case .success(let value): purchases = value
        case .failure(let rejection) where rejection.isRetryable:
            throw TransientError("\(rejection)") // The store could not answer now; nothing was decided.
        case .failure(let rejection):
            return try rejected(submission, rejection, transactionId: nil)
        }
        var events: [any PipelineEvent] = []
        for purchase in purchases {
            // Built before anything is recorded: a purchase whose ids the pipeline cannot carry is rejected, not
            // recorded as verified and then dead-lettered downstream with nobody granting it.
            guard let verified = conforming(PurchaseVerifiedEvent(
                store: Store(rawValue: purchase.store.rawValue) ?? submission.store, transactionId: purchase.transactionId,
                originalTransactionId: purchase.originalTransactionId, productId: purchase.productId, productType: purchase.productType,
                quantity: purchase.quantity, userId: submission.userId, purchaseDate: purchase.purchaseDate, expiresDate: purchase.expiresDate,
                revocationDate: purchase.revocationDate, environment: purchase.environment, appAccountToken: purchase.appAccountToken,
                price: purchase.price, currency: purchase.currency, consumed: purchase.consumed, source: submission.source,
                verifiedAt: context.now()))
            else {
                events.append(rejection(submission, Rejection(.malformedPayload, "the store's ids do not fit the event schema (length, control characters)"),
                                        reason: RejectionReason.malformedPayload.rawValue, transactionId: nil, productId: nil))
                continue
            }
            let record = PurchaseRecord(key: PurchaseKey(store: purchase.store.rawValue, transactionId: purchase.transactionId),
                                        userId: submission.userId, productId: purchase.productId, quantity: purchase.quantity,
                                        purchaseTime: purchase.purchaseDate ?? submission.submittedAt, environment: purchase.environment,
                                        packageName: submission.appcoins?.packageName, purchaseToken: submission.appcoins?.purchaseToken,
                                        storeConsumed: purchase.consumed == true)
            switch try await store.recordVerified(record, at: context.now()) {
            case .existing(_, let owner) where owner != submission.userId:
                // The same transaction replayed under another user: never grant it to a second account.
                events.append(rejection(submission, Rejection(.storeRejected, "transaction belongs to another user"),
                                        reason: "transactionOfAnotherUser", transactionId: purchase.transactionId, productId: purchase.productId))
            case .recorded, .existing:
                events.append(verified)
            }
        }
        return try context.messages(events)
    }

    /// `event` if it matches its schema; else without the informational fields a store may fill oddly (price,
    /// currency, environment, account token), logged; nil when even that does not match (the ids themselves).
    private func conforming(_ event: PurchaseVerifiedEvent) -> PurchaseVerifiedEvent? {
        guard !context.matchesSchema(event) else { return event }
        var trimmed = event
        trimmed.price = nil
        trimmed.currency = nil
        trimmed.environment = nil
        trimmed.appAccountToken = nil
        guard context.matchesSchema(trimmed) else { return nil }
        context.logger.warning("informational fields dropped: they do not fit the event schema", ["transactionId": event.transactionId])
        return trimmed
    }

    private func rejected(_ submission: PurchaseSubmitted, _ rejection: Rejection, transactionId: String?) throws -> StageResult {
        try context.messages([self.rejection(submission, rejection, reason: rejection.reason.rawValue, transactionId: transactionId, productId: nil)])
    }

    private func rejection(_ submission: PurchaseSubmitted, _ rejection: Rejection, reason: String, transactionId: String?, productId: String?) -> PurchaseRejectedEvent {
        PurchaseRejectedEvent(store: submission.store, transactionId: transactionId, productId: productId, userId: submission.userId,
                              reason: reason, retryable: rejection.isRetryable, detail: String(rejection.detail.prefix(2000)),
                              submissionId: submission.submissionId, rejectedAt: context.now(),
                              causeID: transactionId.map { "\(submission.eventID):\($0)" } ?? submission.eventID)
    }

    private func handle(_ received: StoreNotificationReceived) async throws -> StageResult {
        let notification: AppStoreNotification
        switch appStore.verifyNotification(received.signedPayload) {
        case .success(let value): notification = value
        case .failure(let rejection) where rejection.isRetryable: throw TransientError("\(rejection)")
        case .failure(let rejection): return .deadLetter(reason: "notificationRejected", detail: "\(rejection)")
        }
        context.logger.info("notification", ["type": notification.notificationType.rawValue, "action": notification.action.rawValue,
                                             "transactionId": notification.transaction?.transactionId ?? ""])
        guard notification.action == .revokeGrant, let transaction = notification.transaction else { return .publish([]) }
        let owner = try await store.purchase(PurchaseKey(store: Store.appstore.rawValue, transactionId: transaction.transactionId))
        return try context.messages([PurchaseRevokedEvent(
            store: .appstore, transactionId: transaction.transactionId, userId: owner?.userId, productId: transaction.productId,
            reason: notification.notificationType == .revoke ? .REVOKE : .REFUND, revocationDate: transaction.revocationDate,
            notificationUUID: notification.notificationUUID, revokedAt: context.now())])
    }
}

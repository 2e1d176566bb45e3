import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

extension SweeperService {
    /// Asks `purchases.subscriptionsv2` about each Google Play subscription whose latest period expired between
    /// `Configuration.lapseLookback` and `lapseMargin` ago with nothing heard since: a renewal, a recovery or a grace
    /// period whose real-time notification never came, and that the app did not submit either. By what Google answers:
    /// - a later order (renewed, recovered, restarted), or the same order with a later expiry (a grace period, a deferred
    ///   renewal): the notification Google would have pushed (`SUBSCRIPTION_RENEWED`, `SUBSCRIPTION_IN_GRACE_PERIOD`,
    ///   `SUBSCRIPTION_DEFERRED`) is handed to the verifier (`store.notification`, keyed by the purchase token), which
    ///   reads the purchase again and records the period for the owner, as for any notification;
    /// - anything else (canceled, on hold, paused, expired): nothing to grant.
    /// Either way the subscription's status is recorded — which settles it, so it is asked about once — and announced
    /// when it changed. An API that cannot be asked ends the round; a purchase it refuses (a token no longer valid) is
    /// asked about again next sweep, until it leaves the window. Returns how many it settled.
    func settleLapsedGooglePlaySubscriptions(now: Date, with googlePlay: GooglePlayVerifier) async throws -> Int {
        let lapsed = try await store.lapsedSubscriptions(store: .googleplay, expiredWithin: now.addingTimeInterval(-configuration.lapseLookback)...now
            .addingTimeInterval(-configuration.lapseMargin), limit: configuration.batchSize)
        var settled = 0
        for subscription in lapsed {
            guard let packageName = subscription.packageName, let token = subscription.purchaseToken, let productId = subscription.productId else { continue }
            let purchase: GooglePlaySubscriptionPurchase
            switch await googlePlay.verifySubscription(packageName: packageName, productId: productId, purchaseToken: token) {
            case .success(let answered): purchase = answered
            case .failure(let rejection) where rejection.isRetryable && rejection.reason != .purchasePending:
                count("googlePlayUnavailable")
                context.logger.warning("Google Play API unavailable; lapsed subscriptions wait for the next sweep", ["detail": rejection.detail])
                return settled
            case .failure(let rejection):
                context.logger.warning("Google Play refused a lapsed subscription", ["purchaseToken": Fingerprint(token), "reason": rejection.reason.rawValue,
                                                                                      "detail": rejection.detail])
                continue
            }
            let newOrder = purchase.transactionId != subscription.key.transactionId
            let later = (purchase.expiryTime ?? .distantPast) > subscription.expiresDate
            if later {
                let type: Int64 = newOrder ? 2 : purchase.state == .inGracePeriod ? 6 : 9
                let text = GooglePlayDeveloperNotification.subscriptionNotificationText(
                    packageName: packageName, type: type, purchaseToken: token, productId: productId, eventTime: purchase.expiryTime ?? now)
                // What it leads to first: stopped before the status is recorded, the subscription is asked about again.
                try await publish([StoreNotificationReceived(developerNotification: text, purchaseToken: token, receivedAt: context.now())])
            }
            let status = SubscriptionStatus(googlePlay: purchase, originalTransactionId: subscription.originalTransactionId,
                                            asOf: max(now, subscription.expiresDate.addingTimeInterval(0.001)))
            try await recordAndAnnounce(status, owner: subscription.userId)
            settled += 1
            count("googlePlaySubscriptionSettled")
            context.logger.info("lapsed subscription settled with Google Play", [
                "purchaseToken": Fingerprint(token), "state": purchase.state.rawValue,
                "outcome": later ? (newOrder ? "renewal notified" : "expiry moved, notified") : "status recorded"])
        }
        return settled
    }

    /// Refunds the order of each Google Play purchase of `due` that Google still holds as purchased (`orders.refund`,
    /// revoked), in order, until Google cannot be asked: returns the purchases decided (their notices may go out) and
    /// what was done about each one's money. One Google reports canceled was refunded already (by Google itself, three
    /// days after a purchase nobody acknowledged); one it refuses, or that names no token, is left to the operator
    /// (`refused`). A repeat after a crash before the notice was recorded sent finds the order refunded.
    func refundThroughGooglePlay(_ due: [DuePurchase], with googlePlay: GooglePlayVerifier) async
        -> (ready: [DuePurchase], refunds: [PurchaseKey: RefundDue.StoreRefund]) {
        var refunds: [PurchaseKey: RefundDue.StoreRefund] = [:]
        for (index, purchase) in due.enumerated() {
            switch await refund(purchase.record, with: googlePlay) {
            case .unavailable(let detail):
                count("googlePlayUnavailable")
                context.logger.warning("Google Play API unavailable; due refunds wait for the next sweep", ["detail": detail])
                return (Array(due.prefix(index)), refunds)
            case .decided(let refund?):
                refunds[purchase.record.key] = refund
                count("googlePlayRefund." + refund.rawValue)
            case .decided(nil):
                continue
            }
        }
        return (due, refunds)
    }

    /// What became of a due purchase's money at Google Play (`refundThroughGooglePlay`).
    enum GooglePlayRefund {
        /// Refunded now, refunded already, refused; nil: a pending payment, never paid, nothing to give back.
        case decided(RefundDue.StoreRefund?)
        /// Google could not be asked: nothing was done.
        case unavailable(String)
    }

    /// Reads `record`'s purchase and refunds its order when Google still holds it as purchased.
    private func refund(_ record: PurchaseRecord, with googlePlay: GooglePlayVerifier) async -> GooglePlayRefund {
        guard let packageName = record.packageName, let token = record.purchaseToken else { return .decided(.refused) }
        switch await googlePlay.verify(packageName: packageName, productId: record.productId, purchaseToken: token) {
        case .success:
            switch await googlePlay.api.refund(packageName: packageName, orderId: record.key.transactionId) {
            case .success: return .decided(.refunded)
            case .failure(.unavailable(let detail, _)): return .unavailable(detail)
            case .failure(.refused(let status, let detail)):
                context.logger.error("Google Play refused a due refund; refund it by hand", ["transactionId": record.key.transactionId,
                                                                                           "status": status, "detail": detail])
                return .decided(.refused)
            }
        case .failure(let rejection) where rejection.reason == .purchaseNotCompleted: return .decided(.alreadyRefunded)
        case .failure(let rejection) where rejection.reason == .purchasePending: return .decided(nil)
        case .failure(let rejection) where rejection.isRetryable: return .unavailable(rejection.detail)
        case .failure(let rejection):
            context.logger.error("Google Play cannot say what became of a due purchase; refund it by hand",
                                 ["transactionId": record.key.transactionId, "detail": rejection.detail])
            return .decided(.refused)
        }
    }
}

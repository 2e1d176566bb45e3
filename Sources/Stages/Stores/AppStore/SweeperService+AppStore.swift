import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// The App Store, asked about a purchase before the sweeper flags it (`refund.due` costs the operator a refund): the
/// App Store Server API of one environment, and the verifier of what it answers (its signed transactions are trusted
/// no more than an app's).
public struct AppStoreLookup: Sendable {
    public let api: AppStoreServerAPIClient
    public let verifier: SignedDataVerifier

    public init(api: AppStoreServerAPIClient, verifier: SignedDataVerifier) {
        self.api = api
        self.verifier = verifier
    }
}

extension SweeperService {
    /// What the App Store says of a purchase due.
    enum AppStoreAnswer {
        /// Refunded or revoked: its revocation, not a flag.
        case revoked(AppStoreTransaction)
        /// Not refunded (or unknown to the store: nothing says it was refunded): flagged.
        case notRefunded(unknown: Bool)
        /// Not asked (`untrusted`: its answer did not verify): neither, until the next sweep.
        case unavailable(untrusted: Bool)

        /// Its name in `storeChecks`.
        var outcome: String {
            switch self {
            case .revoked: "refunded"
            case .notRefunded(let unknown): unknown ? "unknownToTheStore" : "notRefunded"
            case .unavailable(let untrusted): untrusted ? "untrusted" : "unavailable"
            }
        }
    }

    /// Counts one check of the App Store by what came of it (`storeChecks`).
    func count(_ outcome: String) { checks.withLock { $0[outcome, default: 0] += 1 } }

    /// Asks *Get Transaction Info* about every App Store purchase that is due, a page at a time: one the store reports
    /// refunded or revoked is revoked (its `purchase.revoked`, which the granter applies as the store's notification would
    /// be), one it does not is flagged, one it could not be asked about is neither and is asked again next sweep. A page
    /// none of which could be asked about ends the round (the API is down). Returns how many it flagged.
    func recheckAppStore(deadline: TimeInterval, now: Date, lookups: PerApp<[AppStoreEnvironment: AppStoreLookup]>) async throws -> Int {
        try await recheck(.appstore, deadline: deadline, now: now, api: "App Store Server API", page: { last in
            try await store.dueToAsk(store: .appstore, deadline: deadline, now: now, after: last, limit: configuration.batchSize)
        }) { page in
            var notRefunded: [PurchaseKey] = []
            var revocations: [any PipelineEvent] = []
            var unavailable = 0
            for record in page {
                let answer = await ask(about: record, lookups: lookups)
                count(answer.outcome)
                switch answer {
                case .revoked(let transaction):
                    revocations.append(PurchaseRevokedEvent(
                        store: .appstore, transactionId: record.key.transactionId, originalTransactionId: transaction.originalTransactionId,
                        userId: record.owner, productId: record.productId, reason: .REFUND, revocationDate: transaction.revocationDate,
                        refundShare: RefundShare.of(revocationType: transaction.revocationType, revocationPercentage: transaction.revocationPercentage),
                        decidedAt: transaction.revocationDate, revokedAt: context.now()))
                case .notRefunded: notRefunded.append(record.key)
                case .unavailable: unavailable += 1
                }
            }
            if !revocations.isEmpty {
                try await publish(revocations)
                context.logger.info("due purchases the App Store refunded: revoked, not flagged", ["count": revocations.count])
            }
            return (notRefunded, unavailable)
        }
    }

    /// What the App Store of `record`'s environment says of it.
    private func ask(about record: PurchaseRecord, lookups: PerApp<[AppStoreEnvironment: AppStoreLookup]>) async -> AppStoreAnswer {
        guard let lookup = lookups.forRecorded(app: record.app)?.forRecorded(environment: record.environment) else {
            return .notRefunded(unknown: false) // No API of its environment to ask: flagged, as without a re-check.
        }
        switch await lookup.api.transactionInfo(record.key.transactionId) {
        case .success(let signed):
            switch lookup.verifier.verifyTransaction(signed) {
            case .success(let transaction) where transaction.transactionId == record.key.transactionId:
                return transaction.revocationDate == nil ? .notRefunded(unknown: false) : .revoked(transaction)
            case .success(let transaction):
                context.logger.error("the App Store answered about another transaction; not flagging it this round",
                                     ["transactionId": record.key.transactionId, "answered": transaction.transactionId])
            case .failure(let rejection):
                context.logger.error("the App Store's answer did not verify; not flagging it this round",
                                     ["transactionId": record.key.transactionId, "reason": rejection.reason.rawValue, "detail": "\(rejection)"])
            }
            return .unavailable(untrusted: true)
        case .failure(.unavailable):
            return .unavailable(untrusted: false)
        case .failure(.refused(let status, let detail)):
            // Unknown to the store (404 TransactionIdNotFoundError): nothing says it was refunded.
            context.logger.warning("the App Store does not know a due purchase; flagging it", ["transactionId": record.key.transactionId,
                                                                                              "status": status, "detail": detail])
            return .notRefunded(unknown: true)
        }
    }
}

extension SweeperService {
    /// Asks *Get All Subscription Statuses* about each subscription whose latest period expired between
    /// `Configuration.lapseLookback` and `lapseMargin` ago with nothing heard since (no later period, no status signed
    /// after the expiry: a `DID_RENEW` or an `EXPIRED` that never arrived, and not in the history either). A later period
    /// the store lists is submitted for the subscription's owner with the store's signed transaction (the verifier records
    /// and grants it once; `source: server`); one the store revoked is revoked; one in its billing grace period lasts
    /// until the grace ends (its `purchase.verified` with that expiry, as the verifier extends it from the notification);
    /// the renewal info's status is recorded —
    /// which settles the subscription, so it is asked about once — and announced (`subscription.status`) when it
    /// changed. Answers that do not verify settle nothing; an API that cannot be asked ends the round. Returns how many
    /// subscriptions it settled.
    func settleLapsedSubscriptions(now: Date, lookups: PerApp<[AppStoreEnvironment: AppStoreLookup]>) async throws -> Int {
        let lapsed = try await store.lapsedSubscriptions(store: .appstore, expiredWithin: now.addingTimeInterval(-configuration.lapseLookback)...now
            .addingTimeInterval(-configuration.lapseMargin), limit: configuration.batchSize)
        var settled = 0
        for subscription in lapsed {
            guard let lookup = lookups.forRecorded(app: subscription.app)?.forRecorded(environment: subscription.environment) else { continue }
            let entries: [SubscriptionStatusEntry]
            switch await lookup.api.subscriptionStatuses(of: subscription.key.transactionId) {
            case .success(let answered): entries = answered
            case .failure(.unavailable(let detail, _)):
                count("unavailable")
                context.logger.warning("App Store Server API unavailable; lapsed subscriptions wait for the next sweep", ["detail": detail])
                return settled
            case .failure(.refused(let status, let detail)):
                context.logger.warning("the App Store refused the statuses of a lapsed subscription", ["originalTransactionId": subscription.originalTransactionId,
                                                                                                      "status": status, "detail": detail])
                continue
            }
            guard let entry = entries.first(where: { $0.originalTransactionId == subscription.originalTransactionId }),
                  case .success(let transaction) = lookup.verifier.verifyTransaction(entry.signedTransactionInfo),
                  case .success(let renewal) = lookup.verifier.verifyRenewalInfo(entry.signedRenewalInfo),
                  (transaction.originalTransactionId ?? transaction.transactionId) == subscription.originalTransactionId,
                  renewal.originalTransactionId == subscription.originalTransactionId else {
                count("untrusted")
                context.logger.error("the App Store's statuses of a lapsed subscription are missing or do not verify; not settled",
                                     ["originalTransactionId": subscription.originalTransactionId])
                continue
            }
            var events: [any PipelineEvent] = []
            if let revoked = transaction.revocationDate {
                events.append(PurchaseRevokedEvent(store: .appstore, transactionId: transaction.transactionId, originalTransactionId: subscription.originalTransactionId,
                                                   userId: subscription.userId, productId: transaction.productId, reason: .REFUND, revocationDate: revoked,
                                                   refundShare: RefundShare.of(revocationType: transaction.revocationType,
                                                                               revocationPercentage: transaction.revocationPercentage),
                                                   decidedAt: revoked, revokedAt: context.now()))
            } else if transaction.transactionId != subscription.key.transactionId, (transaction.expiresDate ?? .distantPast) > subscription.expiresDate {
                // A period the pipeline never received: submitted as the app would have, for the owner.
                events.append(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: entry.signedTransactionInfo,
                                                userId: subscription.userId, submittedAt: context.now(), source: .server,
                                                submissionId: UUID().uuidString.lowercased()))
            } else if transaction.transactionId == subscription.key.transactionId, let graceEnd = renewal.gracePeriodExpiresDate,
                      graceEnd > subscription.expiresDate {
                // In its billing grace period (a DID_FAIL_TO_RENEW that never arrived): the period lasts until the grace
                // ends, as the verifier extends it from that notification; the granter extends the entitlement, once.
                events.append(PurchaseVerifiedEvent(store: .appstore, transactionId: transaction.transactionId,
                                                    originalTransactionId: subscription.originalTransactionId, productId: transaction.productId,
                                                    productType: ProductType.autoRenewable.rawValue, quantity: 1, userId: subscription.userId,
                                                    purchaseDate: transaction.purchaseDate, expiresDate: graceEnd, environment: subscription.environment,
                                                    source: .server, verifiedAt: context.now()))
            }
            // What it leads to first: stopped before the status is recorded, the subscription is asked about again.
            try await publish(events)
            let status = SubscriptionStatus(renewal, productId: transaction.productId, asOf: max(renewal.signedDate ?? context.now(), subscription.expiresDate
                .addingTimeInterval(0.001)))
            try await recordAndAnnounce(status, owner: subscription.userId)
            settled += 1
            count("subscriptionSettled")
            context.logger.info("lapsed subscription settled with the App Store", [
                "originalTransactionId": subscription.originalTransactionId, "status": entry.rawStatus,
                "outcome": events.first.map { $0 is PurchaseSubmitted ? "renewal submitted" : $0 is PurchaseVerifiedEvent ? "grace period" : "revoked" }
                    ?? "status recorded"])
        }
        return settled
    }
}

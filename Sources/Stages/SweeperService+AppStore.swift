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
        case notRefunded
        /// Not asked, or its answer not trusted: neither, until the next sweep.
        case unavailable
    }

    /// Asks *Get Transaction Info* about every App Store purchase that is due, a page at a time: one the store reports
    /// refunded or revoked is revoked (its `purchase.revoked`, which the granter applies as the store's notification would
    /// be), one it does not is flagged, one it could not be asked about is neither and is asked again next sweep. A page
    /// none of which could be asked about ends the round (the API is down). Returns how many it flagged.
    func recheckAppStore(deadline: TimeInterval, now: Date, lookups: [AppStoreEnvironment: AppStoreLookup]) async throws -> Int {
        var flagged = 0
        var last: PurchaseRecord?
        while true {
            let page = try await store.dueToAsk(store: .appstore, deadline: deadline, now: now, after: last, limit: configuration.batchSize)
            var notRefunded: [PurchaseKey] = []
            var revocations: [any PipelineEvent] = []
            var unavailable = 0
            for record in page {
                switch await ask(about: record, lookups: lookups) {
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
            if !revocations.isEmpty, case .publish(let messages) = try context.messages(revocations) {
                for result in await producer.send(contentsOf: messages) { _ = try result.get() }
                context.logger.info("due purchases the App Store refunded: revoked, not flagged", ["count": revocations.count])
            }
            let due = try await store.flagDue(notRefunded, deadline: deadline, now: now)
            if !due.isEmpty {
                flagged += due.count
                context.logger.info("flagged refund due", ["store": Store.appstore.rawValue, "count": due.count])
            }
            if !page.isEmpty && unavailable == page.count {
                context.logger.warning("App Store Server API unavailable; asking about the rest next sweep", ["asked": page.count])
                return flagged
            }
            guard page.count == configuration.batchSize, let next = page.last else { return flagged }
            last = next
        }
    }

    /// What the App Store of `record`'s environment says of it (the deployment's own when the record names none).
    private func ask(about record: PurchaseRecord, lookups: [AppStoreEnvironment: AppStoreLookup]) async -> AppStoreAnswer {
        let environment = record.environment.map(AppStoreEnvironment.init(rawValue:))
        guard let lookup = environment.flatMap({ lookups[$0] }) ?? (environment == nil && lookups.count == 1 ? lookups.values.first : nil) else {
            return .notRefunded // No API of its environment to ask: flagged, as without a re-check.
        }
        switch await lookup.api.transactionInfo(record.key.transactionId) {
        case .success(let signed):
            switch lookup.verifier.verifyTransaction(signed) {
            case .success(let transaction) where transaction.transactionId == record.key.transactionId:
                return transaction.revocationDate == nil ? .notRefunded : .revoked(transaction)
            case .success(let transaction):
                context.logger.error("the App Store answered about another transaction; not flagging it this round",
                                     ["transactionId": record.key.transactionId, "answered": transaction.transactionId])
            case .failure(let rejection):
                context.logger.error("the App Store's answer did not verify; not flagging it this round",
                                     ["transactionId": record.key.transactionId, "reason": rejection.reason.rawValue, "detail": "\(rejection)"])
            }
            return .unavailable
        case .failure(.unavailable):
            return .unavailable
        case .failure(.refused(let status, let detail)):
            // Unknown to the store (404 TransactionIdNotFoundError): nothing says it was refunded.
            context.logger.warning("the App Store does not know a due purchase; flagging it", ["transactionId": record.key.transactionId,
                                                                                              "status": status, "detail": detail])
            return .notRefunded
        }
    }
}

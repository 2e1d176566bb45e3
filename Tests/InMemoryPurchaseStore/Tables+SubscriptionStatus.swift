import Foundation
import PurchaseDomain

/// Subscription statuses, as `SQLPurchaseStore+SubscriptionStatus` keeps them: replaced only by newer information.
extension InMemoryPurchaseStore: SubscriptionStatusRepository {
    public func recordSubscriptionStatus(_ status: SubscriptionStatus) async throws -> SubscriptionStatusUpdate {
        try await withTables { tables in
            let update = SubscriptionStatus.update(tables.subscriptionStatuses[status.subscription],
                                                   announced: tables.subscriptionAnnouncements[status.subscription] ?? [], with: status)
            if let standing = update.standing {
                tables.subscriptionStatuses[status.subscription] = standing.keptToTheMillisecond
                tables.subscriptionAnnouncements[status.subscription] = update.announcedFields
            }
            return update
        }
    }

    public func subscriptionStatus(store: Store, originalTransactionId: TransactionID) async throws -> SubscriptionStatus? {
        try await withTables { $0.subscriptionStatuses[PurchaseKey(store: store, transactionId: originalTransactionId)] }
    }

    public func subscriptionStatuses(of userId: UserID) async throws -> [SubscriptionStatus] {
        try await withTables { $0.subscriptionStatuses(of: userId) }
    }

    public func lapsedSubscriptions(store: Store, expiredWithin: ClosedRange<Date>, limit: Int) async throws -> [LapsedSubscription] {
        try await withTables { $0.lapsedSubscriptions(store: store, expiredWithin: expiredWithin, limit: limit) }
    }
}

extension Tables {
    /// The statuses of the subscriptions `userId` owns: those of which they hold a subscription purchase and whose owner
    /// they are, in read order.
    func subscriptionStatuses(of userId: UserID) -> [SubscriptionStatus] {
        subscriptionStatuses.values.filter { status in
            purchases.values.contains { $0.record.userId == userId && $0.record.productType == .autoRenewable && $0.key.store == status.store
                                        && $0.original == status.originalTransactionId }
                && owner(store: status.store, originalTransactionId: status.originalTransactionId) == userId
        }.sorted(by: SubscriptionStatus.inReadOrder)
    }
}

extension Tables {
    /// As `SQLPurchaseStore.lapsedSubscriptionsQuery` selects them.
    func lapsedSubscriptions(store: Store, expiredWithin: ClosedRange<Date>, limit: Int) -> [LapsedSubscription] {
        let (from, to) = (expiredWithin.lowerBound.milliseconds, expiredWithin.upperBound.milliseconds)
        let periods = purchases.values.filter { $0.key.store == store && $0.record.productType == .autoRenewable }
        return periods.compactMap { row -> LapsedSubscription? in
            guard let expires = row.record.expiresDate?.milliseconds, (from...to).contains(expires), [.granted, .finished].contains(row.state),
                  row.record.userId != .nobody else { return nil }
            let later = periods.contains { other in
                other.original == row.original && (other.record.expiresDate?.milliseconds ?? .min) > expires && Lifecycle.provenStates.contains(other.state)
            }
            let heardSince = subscriptionStatuses[PurchaseKey(store: store, transactionId: row.original)].map { $0.asOf.milliseconds > expires } ?? false
            guard !later, !heardSince else { return nil }
            return LapsedSubscription(key: row.key, originalTransactionId: row.original, userId: row.record.userId, environment: row.record.environment,
                                      expiresDate: Date(milliseconds: expires), app: row.record.app, productId: row.record.productId,
                                      packageName: row.record.packageName, purchaseToken: row.record.purchaseToken)
        }.sorted { ($0.expiresDate, $0.key.transactionId) < ($1.expiresDate, $1.key.transactionId) }.prefix(limit).map { $0 }
    }
}

extension SubscriptionStatus {
    /// Its times in whole milliseconds, as the SQL store keeps them.
    var keptToTheMillisecond: SubscriptionStatus {
        var kept = self
        kept.billingIssueSince = billingIssueSince.map { Date(milliseconds: $0.milliseconds) }
        kept.gracePeriodEndsAt = gracePeriodEndsAt.map { Date(milliseconds: $0.milliseconds) }
        kept.pausedUntil = pausedUntil.map { Date(milliseconds: $0.milliseconds) }
        kept.asOf = Date(milliseconds: asOf.milliseconds)
        return kept
    }
}

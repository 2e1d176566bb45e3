import Database
import Foundation
import PurchaseDomain

/// Subscription statuses (`subscription_statuses`, migration 19): the store's latest word on each subscription's renewal,
/// by store and original transaction id, replaced only by newer information (`SubscriptionStatus.update`).
extension SQLPurchaseStore: SubscriptionStatusRepository {
    public func recordSubscriptionStatus(_ status: SubscriptionStatus) async throws -> SubscriptionStatusUpdate {
        let dialect = dialect
        // Another table than the purchases': neither what the batch read ahead nor its deferred writes are concerned.
        return try await executor.run(usingReadAhead: true, inCallingTask: true) { connection in
            try Self.transaction(connection, dialect) {
                let lock = dialect == .postgres ? " FOR UPDATE" : ""
                let stored = try Self.storedStatus(connection, status.subscription, lock: lock)
                let update = SubscriptionStatus.update(stored?.status, announced: stored?.announced ?? [], with: status)
                guard let standing = update.standing else { return update }
                guard stored == nil else {
                    try connection.query(Self.updateStatement, Self.columnValues(standing, announced: update.announcedFields))
                    return update
                }
                // New: unless another writer recorded it meanwhile (then decided against what it recorded).
                if try !connection.query(Self.insertStatement, Self.columnValues(standing, announced: update.announcedFields)).isEmpty { return update }
                let recorded = try Self.storedStatus(connection, status.subscription, lock: lock)
                let again = SubscriptionStatus.update(recorded?.status, announced: recorded?.announced ?? [], with: status)
                if let standing = again.standing { try connection.query(Self.updateStatement, Self.columnValues(standing, announced: again.announcedFields)) }
                return again
            }
        }
    }

    public func subscriptionStatus(store: Store, originalTransactionId: TransactionID) async throws -> SubscriptionStatus? {
        try await executor.run(usingReadAhead: true, inCallingTask: true) { connection in
            try Self.subscriptionStatus(connection, PurchaseKey(store: store, transactionId: originalTransactionId), lock: "")
        }
    }

    public func subscriptionStatuses(of userId: UserID) async throws -> [SubscriptionStatus] {
        let dialect = dialect
        return try await executor.run { connection in
            try Self.transaction(connection, dialect, readOnly: true) { try Self.subscriptionStatuses(connection, of: userId) }
        }
    }

    public func lapsedSubscriptions(store: Store, expiredWithin: ClosedRange<Date>, limit: Int) async throws -> [LapsedSubscription] {
        try await executor.run { connection in
            try connection.query(Self.lapsedSubscriptionsQuery, [.text(store.rawValue), .integer(PurchaseTime.milliseconds(expiredWithin.lowerBound)),
                                                                 .integer(PurchaseTime.milliseconds(expiredWithin.upperBound)), .integer(Int64(limit))])
                .compactMap { row in
                    guard let id: TransactionID = row[0].identifier(), let original: TransactionID = row[1].identifier(), let user: UserID = row[2].identifier(),
                          let expires = row[4].int64 else { return nil }
                    return LapsedSubscription(key: PurchaseKey(store: store, transactionId: id), originalTransactionId: original, userId: user,
                                              environment: row[3].string, expiresDate: PurchaseTime.date(expires), app: row[5].identifier(),
                                              productId: row[6].identifier(), packageName: row[7].identifier(), purchaseToken: row[8].identifier())
                }
        }
    }

    /// Latest periods in force that expired between $2 and $3 (`purchases_subscription_expiry`), with no later period of
    /// their subscription and no status signed after their expiry ($4 the limit).
    static let lapsedSubscriptionsQuery = """
        SELECT p.transaction_id, COALESCE(p.original_transaction_id, p.transaction_id), p.user_id, p.environment, p.expires_at, p.app,
            p.product_id, p.package_name, p.purchase_token FROM purchases p
        WHERE p.store = $1 AND product_type = 'autoRenewable' AND p.expires_at >= $2 AND p.expires_at <= $3
            AND \(LifecycleConditions.state(in: [.granted, .finished])) AND p.user_id <> ''
            AND NOT EXISTS (SELECT 1 FROM purchases later WHERE later.store = p.store AND later.product_type = 'autoRenewable'
                            AND (later.transaction_id = COALESCE(p.original_transaction_id, p.transaction_id)
                                 OR (later.original_transaction_id = COALESCE(p.original_transaction_id, p.transaction_id)
                                     AND later.original_transaction_id <> later.transaction_id))
                            AND later.expires_at > p.expires_at AND \(LifecycleConditions.state(in: Lifecycle.provenStates)))
            AND NOT EXISTS (SELECT 1 FROM subscription_statuses s WHERE s.store = p.store
                            AND s.original_transaction_id = COALESCE(p.original_transaction_id, p.transaction_id) AND s.as_of > p.expires_at)
        ORDER BY p.expires_at LIMIT $4
        """

    /// The statuses of the subscriptions `userId` owns: those of which they hold a subscription purchase
    /// (`purchases_subscriptions_by_user`) and whose owner they are (`ownerQuery`), in read order.
    static func subscriptionStatuses(_ connection: any SQLConnection, of userId: UserID) throws -> [SubscriptionStatus] {
        let candidates = try connection.query("""
            SELECT \(statusColumns) FROM subscription_statuses WHERE (store, original_transaction_id) IN (
                SELECT store, COALESCE(original_transaction_id, transaction_id) FROM purchases WHERE user_id = $1 AND product_type = 'autoRenewable')
            """, [.text(userId)]).compactMap(status)
        return try candidates.filter { status in
            let owner: UserID? = try connection.query(ownerQuery, [.text(status.store.rawValue), .text(status.originalTransactionId)]).first?[0].identifier()
            return owner == userId
        }.sorted(by: SubscriptionStatus.inReadOrder)
    }

    /// The status stored for `subscription`, with what its announcement named (migration 21).
    private static func storedStatus(_ connection: any SQLConnection, _ subscription: PurchaseKey,
                                     lock: String) throws -> (status: SubscriptionStatus, announced: [SubscriptionStatus.Field])? {
        guard let row = try connection.query("SELECT \(statusColumns), announced FROM subscription_statuses WHERE store = $1 AND original_transaction_id = $2\(lock)",
                                             [.text(subscription.store.rawValue), .text(subscription.transactionId)]).first,
              let status = status(row) else { return nil }
        let announced = (row[13].string ?? "").split(separator: ",").compactMap { SubscriptionStatus.Field(rawValue: String($0)) }
        return (status, announced)
    }

    private static func subscriptionStatus(_ connection: any SQLConnection, _ subscription: PurchaseKey, lock: String) throws -> SubscriptionStatus? {
        try connection.query("SELECT \(statusColumns) FROM subscription_statuses WHERE store = $1 AND original_transaction_id = $2\(lock)",
                             [.text(subscription.store.rawValue), .text(subscription.transactionId)]).first.flatMap(status)
    }

    private static let statusColumns = """
        store, original_transaction_id, product_id, will_renew, pending_product_id, billing_issue_since, grace_period_ends_at, \
        price_increase_status, expiration_reason, offer_type, offer_identifier, as_of, paused_until
        """

    private static let insertStatement = """
        INSERT INTO subscription_statuses (\(statusColumns), announced) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
        ON CONFLICT (store, original_transaction_id) DO NOTHING RETURNING store
        """

    private static let updateStatement = """
        UPDATE subscription_statuses SET product_id = $3, will_renew = $4, pending_product_id = $5, billing_issue_since = $6,
            grace_period_ends_at = $7, price_increase_status = $8, expiration_reason = $9, offer_type = $10, offer_identifier = $11, as_of = $12,
            paused_until = $13, announced = $14
        WHERE store = $1 AND original_transaction_id = $2
        """

    /// `status` as the values of `statusColumns`, in their order, then what its announcement names.
    private static func columnValues(_ status: SubscriptionStatus, announced: [SubscriptionStatus.Field]) -> [SQLValue] {
        func integer(_ value: Int64?) -> SQLValue { value.map(SQLValue.integer) ?? .null }
        func time(_ date: Date?) -> SQLValue { integer(date.map(PurchaseTime.milliseconds)) }
        return [.text(status.store.rawValue), .text(status.originalTransactionId), status.productId.map { .text($0) } ?? .null,
                integer(status.willRenew.map { $0 ? 1 : 0 }), status.pendingProductId.map { .text($0) } ?? .null, time(status.billingIssueSince),
                time(status.gracePeriodEndsAt), integer(status.rawPriceIncreaseStatus), integer(status.rawExpirationReason), integer(status.rawOfferType),
                status.offerIdentifier.map { .text($0) } ?? .null, .integer(PurchaseTime.milliseconds(status.asOf)),
                time(status.pausedUntil), .text(announced.map(\.rawValue).joined(separator: ","))]
    }

    /// The status a row of `statusColumns` holds (nil for a row this version cannot read).
    private static func status(_ row: SQLRow) -> SubscriptionStatus? {
        guard let store = row[0].string.flatMap(Store.init(rawValue:)), let original: TransactionID = row[1].identifier(), let asOf = row[11].int64 else { return nil }
        return SubscriptionStatus(store: store, originalTransactionId: original, productId: row[2].identifier(), willRenew: row[3].int64.map { $0 == 1 },
                                  pendingProductId: row[4].identifier(), billingIssueSince: row[5].int64.map(PurchaseTime.date),
                                  gracePeriodEndsAt: row[6].int64.map(PurchaseTime.date), pausedUntil: row[12].int64.map(PurchaseTime.date),
                                  rawPriceIncreaseStatus: row[7].int64,
                                  rawExpirationReason: row[8].int64, rawOfferType: row[9].int64, offerIdentifier: row[10].string,
                                  asOf: PurchaseTime.date(asOf))
    }
}

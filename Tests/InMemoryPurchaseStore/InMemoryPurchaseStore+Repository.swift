import Foundation
import PurchaseDomain

/// The repository's calls, each one atomic access to the tables (see `Tables` and its extensions for what each does).
extension InMemoryPurchaseStore: SweepRepository, ConsumptionRequestRepository {
    // MARK: Reads

    public func purchase(_ key: PurchaseKey) async throws -> PurchaseRecord? {
        try await withTables([key]) { $0.purchases[key]?.record }
    }

    public func states(of keys: [PurchaseKey]) async throws -> [PurchaseKey: PurchaseState] {
        try await statesAndEnvironments(of: keys).mapValues(\.state)
    }

    public func purchases(_ keys: [PurchaseKey]) async throws -> [PurchaseKey: PurchaseRecord] {
        try await withTables(keys) { tables in
            keys.reduce(into: [:]) { records, key in if let row = tables.purchases[key] { records[key] = row.record } }
        }
    }

    public func statesAndEnvironments(of keys: [PurchaseKey]) async throws -> [PurchaseKey: (state: PurchaseState, environment: String?, app: AppID?)] {
        try await withTables(keys) { $0.statesAndEnvironments(of: keys) }
    }

    public func owner(store: Store, originalTransactionId: TransactionID) async throws -> UserID? {
        try await withTables { $0.owner(store: store, originalTransactionId: originalTransactionId) }
    }

    public func openPurchases(store: Store, boughtBefore: Date) async throws -> [AppID?: Int] {
        try await withTables { tables in
            tables.purchases.values.filter { $0.record.key.store == store && Lifecycle.openStates.contains($0.state) && $0.record.purchaseTime < boughtBefore }
                .reduce(into: [:]) { counts, row in counts[row.record.app, default: 0] += 1 }
        }
    }

    public func originalTransactionId(store: Store, purchaseToken: PurchaseToken) async throws -> TransactionID? {
        try await withTables { tables in
            tables.purchases.values.filter { $0.record.key.store == store && $0.record.purchaseToken == purchaseToken }
                .min { $0.record.purchaseTime < $1.record.purchaseTime }.map { $0.record.originalTransactionId ?? $0.record.key.transactionId }
        }
    }

    public func purchases(store: Store, purchaseToken: PurchaseToken) async throws -> [PurchaseKey] {
        try await withTables { tables in
            tables.purchases.values.filter { $0.record.key.store == store && $0.record.purchaseToken == purchaseToken }
                .sorted { first, second in
                    first.record.purchaseTime != second.record.purchaseTime ? first.record.purchaseTime < second.record.purchaseTime
                        : first.record.key.transactionId.rawValue.utf8.lexicographicallyPrecedes(second.record.key.transactionId.rawValue.utf8)
                }
                .map(\.record.key)
        }
    }

    public func purchases(store: Store, originalTransactionId: TransactionID, ownedBy userId: UserID) async throws -> [PurchaseKey] {
        try await withTables { $0.purchases(store: store, originalTransactionId: originalTransactionId, ownedBy: userId) }
    }

    public func appReportedConsumption(_ key: PurchaseKey) async throws -> Date? {
        try await withTables([key]) { $0.purchases[key]?.consumedAt.map(Date.init(milliseconds:)) }
    }

    // MARK: Decisions

    public func recordVerified(_ purchase: PurchaseRecord, at now: Date) async throws -> RecordOutcome {
        try await withTables([purchase.key]) { $0.recordVerified(purchase, at: now) }
    }

    public func recordUnclaimed(_ purchase: PurchaseRecord, at now: Date) async throws -> RecordOutcome {
        try await withTables([purchase.key]) { $0.recordUnclaimed(purchase) }
    }

    public func owner(ofAccountToken token: AccountToken) async throws -> UserID? {
        try await withTables { $0.owner(ofAccountToken: token) }
    }

    public func registerAccountToken(_ token: AccountToken, for userId: UserID, at now: Date) async throws -> UserID {
        try await withTables { $0.registerAccountToken(token, for: userId) }
    }

    public func grant(_ key: PurchaseKey, items: [GrantItem], at now: Date) async throws -> GrantOutcome {
        try await withTables([key]) { tables in Result { () throws(BalanceOutOfRange) in try tables.grant(key, items: items, at: now) } }.get()
    }

    public func finish(_ key: PurchaseKey, at now: Date) async throws -> FinishOutcome {
        try await withTables([key]) { $0.finish(key, at: now) }
    }

    public func revoke(_ key: PurchaseKey, reason: String, decidedAt: Date?, onlyIfDue: Bool, share: RefundShare.Part?, at now: Date) async throws -> RevokeOutcome {
        try await withTables([key]) { $0.revoke(key, reason: reason, decidedAt: decidedAt, onlyIfDue: onlyIfDue, share: share, at: now) }
    }

    public func reinstate(_ key: PurchaseKey, items: [GrantItem], decidedAt: Date?, at now: Date) async throws -> ReinstateOutcome {
        try await withTables([key]) { tables in
            Result { () throws(BalanceOutOfRange) in try tables.reinstate(key, items: items, decidedAt: decidedAt, at: now) }
        }.get()
    }

    public func transfer(_ key: PurchaseKey, to newUser: UserID, policy: RestorePolicy, at now: Date) async throws -> TransferOutcome {
        try await withTables([key]) { $0.transfer(key, to: newUser, policy: policy, at: now) }
    }

    public func expireSubscription(_ key: PurchaseKey, at now: Date) async throws -> ExpireOutcome {
        try await withTables([key]) { $0.expireSubscription(key, at: now) }
    }

    public func extendSubscription(_ key: PurchaseKey, to expiresDate: Date, at now: Date) async throws -> ExtendOutcome {
        try await withTables([key]) { $0.extendSubscription(key, to: expiresDate, at: now) }
    }

    public func recordConsumed(_ key: PurchaseKey, at: Date) async throws -> ConsumptionReport {
        try await withTables([key]) { $0.recordConsumed(key, at: at) }
    }

    // MARK: Sweeps

    public func sweepDue(store: Store, deadline: TimeInterval, now: Date, limit: Int, leavingRecheckable: Bool) async throws -> [DuePurchase] {
        try await withTables { $0.sweepDue(store: store, deadline: deadline, now: now, limit: limit, leavingRecheckable: leavingRecheckable) }
    }

    public func unsentRefundNotices(store: Store, deadline: TimeInterval, limit: Int) async throws -> [DuePurchase] {
        try await withTables { $0.unsentRefundNotices(store: store, deadline: deadline, limit: limit) }
    }

    public func markRefundNoticesSent(_ keys: [PurchaseKey], at now: Date) async throws {
        try await withTables(keys) { $0.markRefundNoticesSent(keys, at: now) }
    }

    public func dueGrantedWithToken(store: Store, deadline: TimeInterval, now: Date, after last: PurchaseRecord?, limit: Int) async throws -> [PurchaseRecord] {
        try await withTables { $0.dueGrantedWithToken(store: store, deadline: deadline, now: now, after: last, limit: limit) }
    }

    public func dueToAsk(store: Store, deadline: TimeInterval, now: Date, after last: PurchaseRecord?, limit: Int) async throws -> [PurchaseRecord] {
        try await withTables { $0.dueToAsk(store: store, deadline: deadline, now: now, after: last, limit: limit) }
    }

    public func flagDue(_ keys: [PurchaseKey], deadline: TimeInterval, now: Date) async throws -> [DuePurchase] {
        try await withTables(keys) { $0.flagDue(keys, deadline: deadline, now: now) }
    }

    @discardableResult
    public func pruneTakenConsumptionReports() async throws -> Int {
        try await withTables { $0.pruneTakenConsumptionReports() }
    }

    // MARK: Consumption requests

    @discardableResult
    public func recordConsent(userId: UserID, consumptionData: Bool, decidedAt: Date, now: Date) async throws -> Bool {
        try await withTables { $0.recordConsent(userId: userId, consumptionData: consumptionData, decidedAt: decidedAt, now: now) }
    }

    public func consumptionDataConsent(of userId: UserID) async throws -> Bool? {
        try await withTables { $0.consents[userId]?.consumptionData }
    }

    public func consumptionFacts(_ key: PurchaseKey) async throws -> ConsumptionFacts? {
        try await withTables([key]) { $0.consumptionFacts(key) }
    }

    public func claimConsumptionRequest(_ key: PurchaseKey, notificationUUID: String, at now: Date, staleAfter: TimeInterval) async throws -> ConsumptionClaim {
        try await withTables([key]) { $0.claimConsumptionRequest(key, notificationUUID: notificationUUID, at: now, staleAfter: staleAfter) }
    }

    public func releaseConsumptionClaim(notificationUUID: String) async throws {
        try await withTables { $0.releaseConsumptionClaim(notificationUUID: notificationUUID) }
    }

    public func recordConsumptionAnswer(notificationUUID: String, outcome: String, detail: String?, at now: Date) async throws {
        try await withTables { $0.recordConsumptionAnswer(notificationUUID: notificationUUID, outcome: outcome, detail: detail, at: now) }
    }
}

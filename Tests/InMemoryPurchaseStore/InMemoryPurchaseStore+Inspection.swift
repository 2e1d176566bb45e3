import Foundation
import PurchaseDomain

/// What tests read of the store beyond the repository's calls, under the names `SQLPurchaseStore` gives them, and what
/// they do to it from outside (the game spending coins).
extension InMemoryPurchaseStore {
    /// A user's currency balances.
    public func balances(of userId: UserID) async throws -> [ItemCode: Int64] {
        try await withTables { $0.balances[userId] ?? [:] }
    }

    /// A user's entitlements in force at `now` and their expiry (nil: no expiry).
    public func entitlements(of userId: UserID, at now: Date = Date()) async throws -> [ItemCode: Date?] {
        var entitlements: [ItemCode: Date?] = [:]
        let inForce = try await withTables { $0.entitlementsInForce(of: userId, at: now) }
        for entitlement in inForce {
            // updateValue: assigning a nil expiry through the subscript would remove the entitlement.
            entitlements.updateValue(entitlement.expiresAt, forKey: entitlement.entitlement)
        }
        return entitlements
    }

    /// What `userId` owns at `now`: balances, entitlements in force, purchases granted but not finished, and the statuses of
    /// their subscriptions.
    public func holdings(of userId: UserID, at now: Date = Date()) async throws -> UserHoldings {
        try await withTables { tables in
            let pending = tables.purchases.values.filter { row in
                row.record.userId == userId && Lifecycle.openStates.contains(row.state) && Lifecycle.awaitingFinishStates.contains(row.state)
            }.sorted(by: Tables.byPurchaseTime).map { row in
                UserHoldings.Pending(store: row.key.store, transactionId: row.key.transactionId, productId: row.record.productId,
                                     productType: row.record.productType, purchasedAt: row.record.purchaseTime, app: row.record.app)
            }
            return UserHoldings(userId: userId, balances: tables.balances[userId] ?? [:], entitlements: tables.entitlementsInForce(of: userId, at: now),
                                pending: pending, subscriptions: tables.subscriptionStatuses(of: userId))
        }
    }

    /// What a purchase grants now: its grants and re-grants less what was taken back.
    public func grantedItems(_ key: PurchaseKey) async throws -> [GrantItem] {
        try await withTables { $0.heldItems(key) }
    }

    /// How the consumption request `notificationUUID` was answered (or why not), if it was; `sending` while claimed.
    public func consumptionAnswer(notificationUUID: String) async throws -> ConsumptionAnswer? {
        try await withTables { $0.consumptionAnswers[NotificationID(notificationUUID)].map(Tables.answer) }
    }

    /// The kept consumption reports whose purchase is not recorded.
    public func consumptionReportsWaiting() async throws -> Int {
        try await withTables { tables in tables.earlyConsumption.keys.filter { tables.purchases[$0] == nil }.count }
    }

    /// Sets `userId`'s balance of `currency`, as the game does when the user spends it.
    public func setBalance(of userId: UserID, _ currency: ItemCode, to amount: Int64) async throws {
        try await withTables { $0.balances[userId, default: [:]][currency] = amount }
    }

    /// Where the books disagree with themselves, as `SQLPurchaseStore.audit` finds it: balances that are not the sum of
    /// their ledger entries (a revocation's shortfall counted back), grant entries without a purchase, purchases finished
    /// without a grant or before it. Empty when they agree.
    public func bookMismatches() async throws -> [String] {
        try await withTables { $0.bookMismatches() }
    }
}

extension Tables {
    /// Active and not expired at `now`, once each: until the latest expiry of the purchases that give it (nil, for good,
    /// outlasts any), with the product of that purchase.
    func entitlementsInForce(of userId: UserID, at now: Date) -> [UserHoldings.Entitlement] {
        let held = entitlements.filter { $0.key.user == userId && $0.value.active && ($0.value.expiresAt.map { $0 > now.milliseconds } ?? true) }
        return Dictionary(grouping: held) { $0.key.code }.sorted { $0.key < $1.key }.compactMap { code, rows in
            let candidates = rows.map { (expiry: $0.value.expiresAt ?? .max, product: purchases[$0.key.key]?.record.productId) }
            guard let longest = candidates.min(by: { ($1.expiry, $0.product ?? "") < ($0.expiry, $1.product ?? "") }) else { return nil }
            return UserHoldings.Entitlement(entitlement: code, productId: longest.product,
                                            expiresAt: longest.expiry == .max ? nil : Date(milliseconds: longest.expiry))
        }
    }

    func bookMismatches() -> [String] {
        var mismatches: [String] = []
        var sums: [UserID: [ItemCode: Int64]] = [:]
        for entry in ledger where entry.itemKind == .currency { sums[entry.userId, default: [:]][entry.code, default: 0] += entry.amount + entry.shortfall }
        for user in Set(sums.keys).union(balances.keys) {
            let (held, summed) = (balances[user] ?? [:], sums[user] ?? [:])
            for currency in Set(held.keys).union(summed.keys) where held[currency] ?? 0 != summed[currency] ?? 0 {
                mismatches.append("\(user) \(currency): balance \(held[currency] ?? 0), ledger \(summed[currency] ?? 0)")
            }
        }
        for key in Set(ledger.filter { $0.kind == .grant }.map(\.key)) where purchases[key] == nil { mismatches.append("\(key): grant without purchase") }
        for row in purchases.values {
            guard let finished = row.finishedAt else { continue }
            let granted = ledger.contains { $0.key == row.key && ($0.kind == .grant || $0.kind == .regrant) }
            if !granted || (row.grantedAt.map { finished < $0 } ?? true) { mismatches.append("\(row.key): finished without a grant") }
        }
        return mismatches
    }
}

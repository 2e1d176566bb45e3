import Foundation
import PurchaseDomain

/// Subscription periods: ended by the store, their renewal date moved, and ended early by an upgrade (a later period of
/// another product of the subscription), as `SQLPurchaseStore+Subscriptions` carries them out.
extension Tables {
    /// A subscription period (`autoRenewable`): its subscription, its start, its product, its recorded expiry.
    struct Period {
        let key: PurchaseKey, original: TransactionID, start: Int64, product: ProductID, recordedExpiry: Date?
    }

    func period(_ key: PurchaseKey) -> Period? {
        guard let row = purchases[key], row.record.productType == .autoRenewable else { return nil }
        return Period(key: key, original: row.original, start: row.purchaseTime, product: row.record.productId, recordedExpiry: row.record.expiresDate)
    }

    mutating func expireSubscription(_ key: PurchaseKey, at now: Date) -> ExpireOutcome {
        let (current, transition) = decide(key, on: .expire)
        guard transition.effects.contains(.endEntitlement), let named = purchases[key] else { return .nothingToEnd(state: current.state) }
        var ended: Set<ItemCode> = []
        // It and the subscription's earlier periods: not a later one's (an expiry can arrive late, after a renewal).
        for row in periods(key.store, original: named.original) where row.purchaseTime <= named.purchaseTime
            && Lifecycle.transition(from: row.state, on: .expire, type: row.record.productType).effects.contains(.endEntitlement) {
            for (entitlement, held) in entitlements where entitlement.key == row.key && held.active {
                entitlements[entitlement] = EntitlementRow(expiresAt: held.expiresAt.map { min($0, now.milliseconds) } ?? now.milliseconds, active: false)
                ended.insert(entitlement.code)
            }
        }
        return ended.isEmpty ? .nothingToEnd(state: current.state) : .ended(entitlements: ended.sorted())
    }

    mutating func extendSubscription(_ key: PurchaseKey, to expiresDate: Date, at now: Date) -> ExtendOutcome {
        let (current, transition) = decide(key, on: .renewalExtended)
        guard transition.effects.contains(.recordExpiry) || transition.effects.contains(.extendEntitlement) else { return .unchanged(state: current.state) }
        // Never past the start of the period that replaced it.
        let until = period(key).flatMap(supersededAt).map { min($0, expiresDate) } ?? expiresDate
        let end = until.milliseconds
        func recordExpiry(_ tables: inout Tables) {
            if let expiry = tables.purchases[key]?.record.expiresDate, expiry.milliseconds >= end { return }
            tables.purchases[key]?.record.expiresDate = Date(milliseconds: end)
        }
        if transition.effects.contains(.recordExpiry) {
            recordExpiry(&self)
            return .unchanged(state: current.state)
        }
        var moved: [ItemCode] = []
        for (entitlement, held) in entitlements where entitlement.key == key && held.active && (held.expiresAt.map { $0 < end } ?? false) {
            entitlements[entitlement]?.expiresAt = end
            moved.append(entitlement.code)
        }
        if !moved.isEmpty {
            recordExpiry(&self)
            return .extended(entitlements: moved.sorted(), until: until)
        }
        // Extended to this date before: in force until then, later than its grant gave.
        let before = entitlements.filter { entitlement, held in
            guard entitlement.key == key, held.active, held.expiresAt == end else { return false }
            let granted = ledger.filter { $0.key == key && $0.itemKind == .entitlement && $0.code == entitlement.code && ($0.kind == .grant || $0.kind == .regrant) }
            return granted.compactMap(\.expiresAt).max().map { end > $0 } ?? false
        }.map(\.key.code)
        return before.isEmpty ? .unchanged(state: current.state) : .extended(entitlements: before.sorted(), until: until)
    }

    /// `items` with each expiring entitlement of a subscription period until the purchase's recorded expiry when that is
    /// later (the renewal date the store moved since the grant), and ending by the start of the period that replaced it.
    func withCurrentExpiry(_ items: [GrantItem], _ key: PurchaseKey) -> [GrantItem] {
        guard items.contains(where: { $0.kind == .entitlement && $0.expiresAt != nil }) else { return items }
        return withCurrentExpiry(items, period(key))
    }

    /// `withCurrentExpiry` of the period read already (nil: not a subscription period, `items` as they are).
    func withCurrentExpiry(_ items: [GrantItem], _ period: Period?) -> [GrantItem] {
        guard let period, items.contains(where: { $0.kind == .entitlement && $0.expiresAt != nil }) else { return items }
        var current = items
        if let recorded = period.recordedExpiry { current = current.map { $0.lasting(until: recorded) } }
        if let end = supersededAt(period) { current = current.map { $0.ending(by: end) } }
        return current
    }

    /// When the period was replaced: the earliest start of a later period of the same subscription, of another product,
    /// that was granted (its entitlements given, whatever became of them since). Nil when none.
    func supersededAt(_ period: Period) -> Date? {
        let granted = Set(entitlements.keys.map(\.key))
        return periods(period.key.store, original: period.original)
            .filter { $0.purchaseTime > period.start && $0.record.productId != period.product && granted.contains($0.key) }
            .map(\.purchaseTime).min().map(Date.init(milliseconds:))
    }

    /// The transactions of the subscription's periods that began before `period` and are of another product: what
    /// `period`, an upgrade, ends at its start.
    func earlierPeriodsOfOtherProducts(_ period: Period) -> Set<TransactionID> {
        Set(periods(period.key.store, original: period.original).filter { $0.purchaseTime < period.start && $0.record.productId != period.product }
            .map(\.key.transactionId))
    }

    /// At the grant (or re-grant) of subscription period `key`: what earlier periods of other products still give past its
    /// start ends then, and those periods are answered (`ended`); and it ends by the start of a later one granted before it.
    mutating func endSupersededPeriods(_ key: PurchaseKey) -> (endsBy: Date?, ended: [EndedPeriod]) {
        guard let period = period(key) else { return (nil, []) }
        let earlier = earlierPeriodsOfOtherProducts(period)
        var capped: [EntitlementKey] = []
        for (entitlement, held) in entitlements where entitlement.key.store == key.store && held.active && (held.expiresAt.map { $0 > period.start } ?? false)
            && earlier.contains(entitlement.key.transactionId) {
            entitlements[entitlement]?.expiresAt = period.start
            capped.append(entitlement)
        }
        let ended = endedPeriods(capped, at: Date(milliseconds: period.start))
        guard let end = supersededAt(period) else { return (nil, ended) }
        for (entitlement, held) in entitlements where entitlement.key == key && (held.expiresAt.map { $0 > end.milliseconds } ?? false) {
            entitlements[entitlement]?.expiresAt = end.milliseconds
        }
        return (end, ended)
    }

    /// The periods `period`, an upgrade, ended at its start when it was granted, as that answered them: for its repeats.
    /// Periods that ended at that date by themselves are not among them.
    func periodsEndedBy(_ period: Period) -> [EndedPeriod] {
        let earlier = earlierPeriodsOfOtherProducts(period)
        let rows = entitlements.filter { entitlement, held in
            guard entitlement.key.store == period.key.store, held.active, held.expiresAt == period.start, earlier.contains(entitlement.key.transactionId) else {
                return false
            }
            let lastedLonger = ledger.contains { $0.key == entitlement.key && $0.itemKind == .entitlement && $0.code == entitlement.code
                && ($0.expiresAt.map { $0 > period.start } ?? false) }
            return lastedLonger || (purchases[entitlement.key]?.record.expiresDate.map { $0.milliseconds > period.start } ?? false)
        }.map(\.key)
        return endedPeriods(rows, at: Date(milliseconds: period.start))
    }

    /// The periods an upgrade beginning at `start` ended, from their entitlement rows: one for each holder, with those
    /// entitlements ending then.
    func endedPeriods(_ rows: [EntitlementKey], at start: Date) -> [EndedPeriod] {
        struct Holding: Hashable { let key: PurchaseKey, holder: UserID }
        var codes: [Holding: Set<ItemCode>] = [:]
        for row in rows { codes[Holding(key: row.key, holder: row.user), default: []].insert(row.code) }
        return codes.sorted { ($0.key.key.transactionId, $0.key.holder) < ($1.key.key.transactionId, $1.key.holder) }.compactMap { holding, codes in
            guard let record = purchases[holding.key]?.record else { return nil }
            return EndedPeriod(key: holding.key, userId: holding.holder, productId: record.productId, quantity: record.quantity, endedAt: start,
                               items: codes.sorted().map { .entitlement($0, until: start) })
        }
    }

    /// `endSupersededPeriods` for a grant or re-grant of `items` to the purchase `current`, when it is a subscription period's.
    mutating func endingSupersededPeriods(_ current: CurrentPurchase, _ items: [GrantItem], _ key: PurchaseKey) -> (endsBy: Date?, ended: [EndedPeriod]) {
        guard current.type == .autoRenewable, items.contains(where: { $0.kind == .entitlement && $0.expiresAt != nil }) else { return (nil, []) }
        return endSupersededPeriods(key)
    }
}

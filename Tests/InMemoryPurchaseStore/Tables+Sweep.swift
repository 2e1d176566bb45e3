import Foundation
import PurchaseDomain

/// The sweeper's reads and flags: purchases paid but left unconsumed past their deadline, and the outbox of their
/// `refund.due` events, selected by the lifecycle's own state sets as `SQLPurchaseStore+Sweep` selects them.
extension Tables {
    /// Of a type flagged when unconsumed, in a state the deadline flags, purchased before `cutoff`, not known consumed.
    static func isDue(_ row: PurchaseRow, cutoff: Int64) -> Bool {
        Lifecycle.dueStates.contains(row.state) && Lifecycle.typesFlaggedAtDeadline.contains(row.record.productType)
            && row.purchaseTime < cutoff && !row.knownConsumed
    }

    /// What the sweeper may ask the store about again: granted consumables with the store's token.
    static func isRecheckable(_ row: PurchaseRow) -> Bool {
        Lifecycle.recheckableStates.contains(row.state) && Lifecycle.typesFlaggedAtDeadline.contains(row.record.productType) && row.record.purchaseToken != nil
    }

    static func cutoff(_ now: Date, _ deadline: TimeInterval) -> Int64 { now.addingTimeInterval(-deadline).milliseconds }

    mutating func sweepDue(store: Store, deadline: TimeInterval, now: Date, limit: Int, leavingRecheckable: Bool) -> [DuePurchase] {
        let cutoff = Self.cutoff(now, deadline)
        // Open ones first, then charges nobody claimed, as the SQL store reads them.
        let due = purchases.values.filter { $0.key.store == store && Self.isDue($0, cutoff: cutoff) && !(leavingRecheckable && Self.isRecheckable($0)) }
        let (open, unclaimed) = (due.filter { Lifecycle.openStates.contains($0.state) }, due.filter { !Lifecycle.openStates.contains($0.state) })
        let read = open.sorted(by: Self.byPurchaseTime).prefix(limit) + unclaimed.sorted(by: Self.byPurchaseTime).prefix(max(0, limit - open.count))
        return flag(Array(read), now: now, deadline: deadline)
    }

    mutating func flagDue(_ keys: [PurchaseKey], deadline: TimeInterval, now: Date) -> [DuePurchase] {
        let cutoff = Self.cutoff(now, deadline)
        return flag(keys.compactMap { purchases[$0] }.filter { Self.isDue($0, cutoff: cutoff) }, now: now, deadline: deadline)
    }

    /// Flags the purchases of `rows` (read as due) the lifecycle flags, each once (a row read twice is flagged by the
    /// first); those this flagged.
    private mutating func flag(_ rows: [PurchaseRow], now: Date, deadline: TimeInterval) -> [DuePurchase] {
        var due: [DuePurchase] = []
        for row in rows {
            let transition = Lifecycle.transition(from: row.state, on: .deadlinePassed, type: row.record.productType)
            guard transition.effects.contains(.flagRefundDue), let still = purchases[row.key], Lifecycle.dueStates.contains(still.state),
                  !still.knownConsumed else { continue }
            setState(row.key, transition.to, at: now)
            var record = row.record
            record.state = transition.to
            due.append(DuePurchase(record: record, previousState: row.state, deadline: record.purchaseTime.addingTimeInterval(deadline)))
        }
        return due
    }

    func dueGrantedWithToken(store: Store, deadline: TimeInterval, now: Date, after last: PurchaseRecord?, limit: Int) -> [PurchaseRecord] {
        duePage(store: store, deadline: deadline, now: now, after: last, limit: limit, where: Self.isRecheckable)
    }

    func dueToAsk(store: Store, deadline: TimeInterval, now: Date, after last: PurchaseRecord?, limit: Int) -> [PurchaseRecord] {
        duePage(store: store, deadline: deadline, now: now, after: last, limit: limit) { _ in true }
    }

    /// The due purchases of `store` that pass `filter`, the page of `limit` after `last`.
    private func duePage(store: Store, deadline: TimeInterval, now: Date, after last: PurchaseRecord?, limit: Int,
                         where filter: (PurchaseRow) -> Bool) -> [PurchaseRecord] {
        let cutoff = Self.cutoff(now, deadline)
        let position = last.map { ($0.purchaseTime.milliseconds, $0.key.transactionId) } ?? (Int64.min, "")
        return purchases.values.filter { row in
            row.key.store == store && Self.isDue(row, cutoff: cutoff) && filter(row)
                && (row.purchaseTime > position.0 || (row.purchaseTime == position.0 && row.key.transactionId > position.1))
        }.sorted(by: Self.byPurchaseTimeThenId).prefix(limit).map(\.record)
    }

    func unsentRefundNotices(store: Store, deadline: TimeInterval, limit: Int) -> [DuePurchase] {
        purchases.values.filter { $0.key.store == store && $0.state == Lifecycle.flaggedState && $0.refundNotifiedAt == nil }
            .sorted(by: Self.byPurchaseTime).prefix(limit).map { row in
                DuePurchase(record: row.record, previousState: .refundDue, deadline: row.record.purchaseTime.addingTimeInterval(deadline))
            }
    }

    mutating func markRefundNoticesSent(_ keys: [PurchaseKey], at now: Date) {
        for key in keys { purchases[key]?.refundNotifiedAt = now.milliseconds }
    }
}

import Foundation
import PurchaseDomain

/// The hot decisions: record, grant, finish; and the reads that go with them.
extension Tables {
    mutating func recordVerified(_ purchase: PurchaseRecord, at now: Date) -> RecordOutcome {
        let (current, transition) = decide(purchase.key, on: .verified, type: purchase.productType)
        if transition.effects.contains(.claimPurchase) {
            purchases[purchase.key]?.record.userId = purchase.userId
            purchases[purchase.key]?.record.state = transition.to
            if purchases[purchase.key]?.record.appAccountToken == nil { purchases[purchase.key]?.record.appAccountToken = purchase.appAccountToken }
            return .recorded
        }
        guard transition.effects.contains(.recordPurchase) else { return .existing(state: current.state, userId: current.userId ?? purchase.userId) }
        insert(purchase, state: transition.to)
        return transition.to == .revoked ? .revokedEarlier : .recorded
    }

    mutating func recordUnclaimed(_ purchase: PurchaseRecord) -> RecordOutcome {
        let (current, transition) = decide(purchase.key, on: .chargeAnnounced, type: purchase.productType)
        guard transition.effects.contains(.recordPurchase) else { return .existing(state: current.state, userId: current.userId ?? .nobody) }
        var unowned = purchase
        unowned.userId = .nobody
        insert(unowned, state: transition.to)
        return transition.to == .revoked ? .revokedEarlier : .recorded
    }

    /// The user `token` was registered for; else the owner of the latest proven purchase bound to it, neither unclaimed
    /// nor restored by another user since.
    func owner(ofAccountToken token: AccountToken) -> UserID? {
        if let registered = accountTokens[token.folded] { return registered }
        let transferred = Set(ledger.filter { $0.kind == .transfer }.map(\.key))
        return purchases.values.filter { row in
            Lifecycle.provenStates.contains(row.state) && row.record.appAccountToken?.isSameAccount(as: token) == true && row.record.userId != .nobody
                && !transferred.contains(row.key)
        }
            .max { ($0.purchaseTime, $0.recorded) < ($1.purchaseTime, $1.recorded) }?.record.userId
    }

    /// The first registration of a token stands; one a purchase of another user is bound to (and nobody registered) is theirs.
    mutating func registerAccountToken(_ token: AccountToken, for userId: UserID) -> UserID {
        if let owner = owner(ofAccountToken: token), owner != userId { return owner }
        if accountTokens[token.folded] == nil { accountTokens[token.folded] = userId }
        return accountTokens[token.folded] ?? userId
    }

    mutating func grant(_ key: PurchaseKey, items: [GrantItem], at now: Date) throws(BalanceOutOfRange) -> GrantOutcome {
        let (current, transition) = decide(key, on: .grant)
        switch transition.outcome {
        case .applied:
            // Checked before anything is written, as the SQL store checks it.
            if let refusal = BalanceOutOfRange.first(of: items, adding: balances[current.userId ?? ""] ?? [:]) { throw refusal }
            let applied = apply(items, entry: .grant, key, userId: current.userId ?? "", at: now)
            let superseded = endingSupersededPeriods(current, items, key)
            setState(key, transition.to, at: now, stamping: \.grantedAt)
            return .granted(ledgerEntryIds: applied.ledgerEntryIds, balances: applied.balances, endsBy: superseded.endsBy, ended: superseded.ended)
        case .repeated:
            // As granted, with the renewal date the store moved since; the user's balances of its currencies as they are now.
            let period = current.type == .autoRenewable ? period(key) : nil
            let original = withCurrentExpiry(ledgerItems(key, kind: .grant), period)
            let balances = (balances[current.userId ?? ""] ?? [:]).filter { currency, _ in
                original.contains { $0.kind == .currency && $0.code == currency }
            }
            // An upgrade: the periods it ended, answered again (its first answers may have been lost).
            return .alreadyGranted(items: original, balances: balances, ended: period.map(periodsEndedBy) ?? [])
        case .waiting, .refused, .ignored:
            return .notGrantable(state: current.state.isRecorded ? current.state : nil)
        }
    }

    mutating func finish(_ key: PurchaseKey, at now: Date) -> FinishOutcome {
        let (current, transition) = decide(key, on: .finish)
        switch transition.outcome {
        case .applied:
            setState(key, transition.to, at: now, stamping: \.finishedAt)
            return .finished
        case .repeated: return .alreadyFinished
        case .waiting, .refused, .ignored: return .notGranted(state: current.state.isRecorded ? current.state : nil)
        }
    }

    /// Moves the recorded purchase `key` to `state`, stamped `now` in `column` (if any).
    mutating func setState(_ key: PurchaseKey, _ state: PurchaseState, at now: Date, stamping column: WritableKeyPath<PurchaseRow, Int64?>? = nil) {
        purchases[key]?.record.state = state
        if let column { purchases[key]?[keyPath: column] = now.milliseconds }
    }

    // MARK: Reads

    func statesAndEnvironments(of keys: [PurchaseKey]) -> [PurchaseKey: (state: PurchaseState, environment: String?, app: AppID?)] {
        var found: [PurchaseKey: (state: PurchaseState, environment: String?, app: AppID?)] = [:]
        for key in keys { if let row = purchases[key] { found[key] = (row.state, row.record.environment, row.record.app) } }
        return found
    }

    /// The user of the latest proven purchase of the subscription (neither rejected nor unclaimed).
    func owner(store: Store, originalTransactionId: TransactionID) -> UserID? {
        periods(store, original: originalTransactionId).filter { Lifecycle.provenStates.contains($0.state) && $0.record.userId != .nobody }
            .max { ($0.purchaseTime, $0.recorded) < ($1.purchaseTime, $1.recorded) }?.record.userId
    }

    func purchases(store: Store, originalTransactionId: TransactionID, ownedBy userId: UserID) -> [PurchaseKey] {
        periods(store, original: originalTransactionId).filter { $0.record.userId == userId }.sorted(by: Self.byPurchaseTime).map(\.key)
    }

    /// Oldest first; of purchases at the same time, in the order they were recorded (see `PurchaseRow.recorded`).
    static func byPurchaseTime(_ left: PurchaseRow, _ right: PurchaseRow) -> Bool {
        (left.purchaseTime, left.recorded) < (right.purchaseTime, right.recorded)
    }

    /// Oldest first, then by transaction id: the order the sweeper pages through purchases in.
    static func byPurchaseTimeThenId(_ left: PurchaseRow, _ right: PurchaseRow) -> Bool {
        (left.purchaseTime, left.key.transactionId) < (right.purchaseTime, right.key.transactionId)
    }
}

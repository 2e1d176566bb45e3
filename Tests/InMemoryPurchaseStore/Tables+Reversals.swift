import Foundation
import PurchaseDomain

/// What is taken back or given again after the grant: refunds and revocations (in any order with the purchase),
/// reversed refunds, and restores under another user.
extension Tables {
    mutating func revoke(_ key: PurchaseKey, reason: String, decidedAt: Date?, onlyIfDue: Bool, share: RefundShare.Part?, at now: Date) -> RevokeOutcome {
        let (current, transition) = decide(key, on: onlyIfDue ? .clawBack : .revoke)
        guard takeRefundDecision(key, decidedAt: decidedAt) else { return .outdated }
        switch transition.outcome {
        case .repeated: return .alreadyRevoked
        case .waiting, .refused, .ignored: return .notRevocable(state: current.state)
        case .applied: break
        }
        if transition.effects.contains(.recordTombstone) {
            tombstones[key] = Tombstone(reason: reason, revokedAt: now.milliseconds, reversedAt: nil)
            return .recordedBeforePurchase
        }
        var shortfall: [ItemCode: Int64] = [:]
        if transition.effects.contains(.reverseGrants), let userId = current.userId {
            for held in heldItems(key) {
                var item = held
                if item.kind == .currency { item.amount = RefundShare.takenBack(item.amount, part: share, of: purchases[key]?.record.quantity ?? 1) }
                var missing: Int64 = 0
                switch item.kind {
                case .currency:
                    // Never below zero: what was spent already is the shortfall.
                    let balance = balances[userId]?[item.code] ?? 0
                    let taken = min(balance, item.amount)
                    missing = item.amount - taken
                    if balances[userId]?[item.code] != nil { balances[userId]?[item.code] = balance - taken }
                    if missing > 0 { shortfall[item.code, default: 0] += missing }
                case .entitlement:
                    // What this purchase gives, whoever holds it now (a restore may have moved it); other purchases' stay.
                    for (entitlement, _) in entitlements where entitlement.code == item.code && entitlement.key == key {
                        entitlements[entitlement]?.active = false
                    }
                }
                writeLedger(key, .revoke, user: userId, item.kind, code: item.code, amount: -item.amount, shortfall: missing, expiresAt: nil, at: now)
            }
        }
        setState(key, transition.to, at: now)
        return .revoked(shortfall: shortfall)
    }

    mutating func reinstate(_ key: PurchaseKey, items: [GrantItem], decidedAt: Date?, at now: Date) throws(BalanceOutOfRange) -> ReinstateOutcome {
        // What the reversal means is read off what the refund took back, as the SQL store reads it (`RefundReversal`).
        let current = current(key)
        let took = current.state == .revoked ? takenBack(key) : nil
        let reversal = RefundReversal(owner: current.userId.flatMap { $0 == .nobody ? nil : $0 }, tookBackGrants: took != nil,
                                      hasItemsToGive: (took ?? items).contains { $0.amount > 0 })
        let (_, transition) = decide(key, on: .refundReversed(reversal))
        // What it gives back checked before anything is written (the decision included), as the SQL store checks it.
        let regranting = transition.outcome == .applied && transition.effects.contains(.regrantItems)
        // What the refund took back (not what was spent before it), or `items` for a purchase revoked before its grant.
        var granted = regranting ? (took ?? items).filter { $0.amount > 0 } : []
        if let userId = current.userId, let refusal = BalanceOutOfRange.first(of: granted, adding: balances[userId] ?? [:]) {
            throw refusal
        }
        guard takeRefundDecision(key, decidedAt: decidedAt) else { return .outdated }
        guard transition.outcome == .applied else { return .notRevoked(state: current.state) }
        if transition.effects.contains(.clearTombstone) {
            tombstones[key]?.reversedAt = now.milliseconds
            return .tombstoneCleared
        }
        guard regranting else {
            // Never granted: as its refund found it, its times as they were.
            setState(key, transition.to, at: now)
            return .returned(to: transition.to)
        }
        let applied = apply(granted, entry: .regrant, key, userId: current.userId ?? .nobody, at: now)
        let superseded = endingSupersededPeriods(current, granted, key)
        if let end = superseded.endsBy { granted = granted.map { $0.ending(by: end) } }
        setState(key, transition.to, at: now, stamping: \.finishedAt)
        // Revoked before its grant: the re-grant is its grant.
        if purchases[key]?.grantedAt == nil { purchases[key]?.grantedAt = now.milliseconds }
        return .reinstated(items: granted, ledgerEntryIds: applied.ledgerEntryIds, balances: applied.balances, ended: superseded.ended)
    }

    /// Records `decidedAt` as the store's latest refund decision about `key`, unless a later one is recorded: then this one
    /// is outdated (false). Nil is not ordered: always taken, nothing recorded.
    mutating func takeRefundDecision(_ key: PurchaseKey, decidedAt: Date?) -> Bool {
        guard let decidedAt else { return true }
        if let recorded = refundDecisions[key], recorded > decidedAt.milliseconds { return false }
        refundDecisions[key] = decidedAt.milliseconds
        return true
    }

    /// What the purchase's last revocation took back, per item: its entries (those after the last re-grant) less their
    /// shortfall; an entitlement until the expiry its grants gave (or the store moved it to since). Nil when it wrote
    /// none: revoked before its grant.
    func takenBack(_ key: PurchaseKey) -> [GrantItem]? {
        let lastRegrant = ledger.filter { $0.key == key && $0.kind == .regrant }.map(\.id).max() ?? 0
        let revocations = ledger.filter { $0.key == key && $0.kind == .revoke && $0.id > lastRegrant }
        guard !revocations.isEmpty else { return nil }
        let grants = ledger.filter { $0.key == key && ($0.kind == .grant || $0.kind == .regrant) }
        let items = Self.summed(revocations, amount: { -$0.amount - $0.shortfall }, expiry: { group in
            grants.filter { $0.itemKind == group[0].itemKind && $0.code == group[0].code }.compactMap(\.expiresAt).max()
        })
        return withCurrentExpiry(items, key)
    }

    mutating func transfer(_ key: PurchaseKey, to newUser: UserID, policy: RestorePolicy, at now: Date) -> TransferOutcome {
        let (current, transition) = decide(key, on: .restoreByAnotherUser(policy))
        guard let owner = current.userId else { return .refused(owner: UserID(""), reason: transition.reason ?? .transactionOfAnotherUser) }
        if owner == newUser { return .alreadyOwned }
        guard transition.effects.contains(.transferEntitlement) else { return .refused(owner: owner, reason: transition.reason ?? .transactionOfAnotherUser) }
        purchases[key]?.record.userId = newUser
        let items = heldItems(key).filter { $0.kind == .entitlement }
        for item in items {
            entitlements[EntitlementKey(user: owner, code: item.code, key: key)]?.active = false
            giveEntitlement(item, to: newUser, from: key)
            // Amount 0: a move changes who holds the entitlement, not what the purchase gives.
            writeLedger(key, .transfer, user: newUser, .entitlement, code: item.code, amount: 0, expiresAt: item.expiresAt?.milliseconds, at: now)
        }
        return .transferred(from: owner, items: items)
    }
}

import Database
import Foundation
import PurchaseDomain

/// Adjustments by hand: each is recorded once by its id in `adjustments` (migration 27), and its items are ledger entries
/// whose source is `('adjustment', id)` in place of a purchase's `(store, transaction_id)`, so that the books balance and
/// the user's history shows them like any grant.
extension SQLPurchaseStore: AdjustmentRepository {
    /// The ledger's and entitlements' `store` for what adjustments gave or took.
    static let adjustmentSource = "adjustment"

    public func adjust(_ adjustment: Adjustment, takeWhatIsLeft: Bool, at now: Date) async throws -> AdjustmentOutcome {
        let dialect = dialect
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) { try Self.adjust(adjustment, takeWhatIsLeft: takeWhatIsLeft, at: now, connection, dialect) }
        }
    }

    /// What an adjustment's request asks, to recognise its repeats: what it reverses and its items (its user is compared
    /// apart, so that an erasure leaves no id in it).
    static func signature(of adjustment: Adjustment) -> String {
        let items = adjustment.items.map { item in
            "\(item.kind.rawValue):\(item.code):\(item.amount):\(item.expiresAt.map { String(PurchaseTime.milliseconds($0)) } ?? "")"
        }
        return ([adjustment.reverses?.rawValue ?? ""] + items).joined(separator: "\n")
    }

    /// What an applied adjustment gave or took, as it was (a take's shortfall was never taken: a reversal gives back what
    /// was taken, not what was asked for).
    private static func appliedItems(_ connection: any SQLConnection, _ id: AdjustmentID) throws -> [GrantItem] {
        try connection.query("""
            SELECT item_kind, code, sum(amount + shortfall), max(expires_at) FROM ledger WHERE store = $1 AND transaction_id = $2
            GROUP BY item_kind, code ORDER BY item_kind, code
            """, [.text(adjustmentSource), .text(id)]).compactMap(grantItem)
    }

    private static func adjust(_ adjustment: Adjustment, takeWhatIsLeft: Bool, at now: Date, _ connection: any SQLConnection,
                               _ dialect: Migrations.Dialect) throws -> AdjustmentOutcome {
        let lock = dialect == .postgres ? " FOR UPDATE" : ""
        let signature = signature(of: adjustment)
        // The id first: a repeat changes nothing, whatever happened since.
        // Ids and signatures compare as bytes (`Identifier`, `Array(utf8)`), never as Unicode-equivalent Strings.
        if let row = try connection.query("SELECT signature, user_id FROM adjustments WHERE adjustment_id = $1\(lock)", [.text(adjustment.id)]).first {
            guard row[0].string.map({ Array($0.utf8) }) == Array(signature.utf8), row[1].identifier(UserID.self) == adjustment.userId else {
                return .refused(.idReused, detail: "adjustment \(adjustment.id) was applied before with another user or other items")
            }
            // The first answer again, in full: it may be the one that was lost.
            let items = try appliedItems(connection, adjustment.id)
            return .alreadyApplied(items: items, balances: try balances(connection, of: adjustment.userId, codes: items.map(\.code)))
        }
        var items = adjustment.items
        if let reversed = adjustment.reverses {
            guard items.isEmpty else { return .refused(.invalidItems, detail: "a reversal names no items: it undoes those of \(reversed)") }
            guard let row = try connection.query("SELECT user_id, reverses, reversed_by FROM adjustments WHERE adjustment_id = $1\(lock)",
                                                 [.text(reversed)]).first else {
                return .refused(.unknownAdjustment, detail: "no adjustment \(reversed) was applied")
            }
            guard row[0].identifier(UserID.self) == adjustment.userId, row[1].string == nil, row[2].string == nil else {
                return .refused(.notReversible, detail: "adjustment \(reversed) is another user's, a reversal itself, or reversed already")
            }
            let applied = try appliedItems(connection, reversed).filter { $0.amount != 0 }
            // Negated without trapping: an amount recorded before amounts were bounded may have no negation.
            guard applied.allSatisfy({ $0.amount != .min }) else {
                return .refused(.amountOutOfRange, detail: "adjustment \(reversed) gave or took an amount that cannot be given back")
            }
            items = applied.map { GrantItem(kind: $0.kind, code: $0.code, amount: -$0.amount) }
        } else {
            guard !items.isEmpty, items.allSatisfy({ $0.kind == .currency ? $0.amount != 0 : $0.amount == 1 }) else {
                return .refused(.invalidItems, detail: "an adjustment gives or takes a non-zero currency amount, or gives an entitlement "
                                + "(to take an entitlement a purchase gave, revoke the purchase; one an adjustment gave, reverse it)")
            }
            guard items.allSatisfy({ $0.kind == .entitlement || CurrencyAmounts.isItemAmount($0.amount) }) else {
                return .refused(.amountOutOfRange, detail: "an adjustment gives or takes at most \(CurrencyAmounts.itemLimit) of a currency")
            }
            // One line per item: two lines of a currency would each be checked against the same balance.
            guard Set(items.map { GrantItem(kind: $0.kind, code: $0.code, amount: 0) }).count == items.count else {
                return .refused(.invalidItems, detail: "each currency or entitlement once per adjustment")
            }
        }

        // Every take and every give is checked before anything is written: refused, the adjustment leaves no trace.
        var shortfall: [ItemCode: Int64] = [:]
        var taken: [ItemCode: Int64] = [:]
        for item in items where item.kind == .currency {
            let balance = try connection.query("SELECT amount FROM balances WHERE user_id = $1 AND currency = $2\(lock)",
                                               [.text(adjustment.userId), .text(item.code)]).first?[0].int64 ?? 0
            guard item.amount < 0 else {
                guard CurrencyAmounts.balance(balance, adding: item.amount) != nil else {
                    return .refused(.amountOutOfRange, detail: BalanceOutOfRange(currency: item.code, balance: balance, amount: item.amount).description)
                }
                continue
            }
            let wanted = -item.amount // never .min: bounded above, or the negation of a recorded amount
            if balance < wanted {
                guard takeWhatIsLeft else {
                    return .refused(.insufficientBalance, detail: "the user has \(balance) \(item.code), fewer than the \(wanted) to take")
                }
                shortfall[item.code] = wanted - balance
            }
            taken[item.code] = min(balance, wanted)
        }

        let at = SQLValue.integer(PurchaseTime.milliseconds(now))
        let source: [SQLValue] = [.text(adjustmentSource), .text(adjustment.id)]
        for item in items {
            switch (item.kind, item.amount > 0) {
            case (.currency, true):
                _ = try connection.query(addToBalanceAlone, [.text(adjustment.userId), .text(item.code), .integer(item.amount)])
            case (.currency, false):
                try connection.query("UPDATE balances SET amount = amount - $3 WHERE user_id = $1 AND currency = $2",
                                     [.text(adjustment.userId), .text(item.code), .integer(taken[item.code] ?? 0)])
            case (.entitlement, true):
                try giveEntitlement(connection, item, to: adjustment.userId, source: source)
            case (.entitlement, false):
                // A reversal: what the reversed adjustment gave ends.
                try connection.query("UPDATE entitlements SET active = 0 WHERE user_id = $1 AND entitlement = $2 AND store = $3 AND transaction_id = $4",
                                     [.text(adjustment.userId), .text(item.code), .text(adjustmentSource), .text(adjustment.reverses ?? "")])
            }
            try connection.query("""
                INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, shortfall, expires_at, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                """, source + [.text(item.amount > 0 ? "grant" : "revoke"), .text(adjustment.userId), .text(item.kind.rawValue), .text(item.code),
                               .integer(item.amount), .integer(shortfall[item.code] ?? 0),
                               item.expiresAt.map { .integer(PurchaseTime.milliseconds($0)) } ?? .null, at])
        }
        try connection.query("""
            INSERT INTO adjustments (adjustment_id, user_id, requested_by, reason, reverses, signature, applied_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
            """, [.text(adjustment.id), .text(adjustment.userId), .text(adjustment.requestedBy), .text(adjustment.reason),
                  adjustment.reverses.map { .text($0) } ?? .null, .text(signature), at])
        if let reversed = adjustment.reverses {
            try connection.query("UPDATE adjustments SET reversed_by = $2 WHERE adjustment_id = $1", [.text(reversed), .text(adjustment.id)])
        }
        return .applied(items: items, balances: try balances(connection, of: adjustment.userId, codes: items.map(\.code)), shortfall: shortfall)
    }

    /// The user's balances of the currencies among `codes`.
    private static func balances(_ connection: any SQLConnection, of userId: UserID, codes: [ItemCode]) throws -> [ItemCode: Int64] {
        try balances(connection, of: userId).filter { codes.contains($0.key) }
    }
}

/// The bounds of currency amounts. Every amount the pipeline takes from outside (a catalog product's, an adjustment's) and
/// every balance it keeps stays within them, so that no sum the books make of them (a balance, a user's ledger, the totals of
/// an audit) can pass what a 64-bit integer holds: a change that would take a balance past them is refused with a reason,
/// before anything is written, never wrapped, trapped on or stored as a floating-point number.
public enum CurrencyAmounts {
    /// The most one item gives or takes: a catalog product's amount, an adjustment's (10^12).
    public static let itemLimit: Int64 = 1_000_000_000_000
    /// The most a user's balance of one currency holds (10^15): the largest product bought at the largest quantity (1000)
    /// reaches it from zero.
    public static let balanceLimit: Int64 = 1_000_000_000_000_000
    /// The units of a product one purchase may buy (the events' `quantity`): a store's proof of another is refused.
    public static let quantities: ClosedRange<Int> = 1...1000

    /// `balance` changed by `change` when the result stays within `0...balanceLimit`; nil otherwise (never traps).
    public static func balance(_ balance: Int64, adding change: Int64) -> Int64? {
        let (sum, overflow) = balance.addingReportingOverflow(change)
        return !overflow && (0...balanceLimit).contains(sum) ? sum : nil
    }

    /// Whether `amount` is one an item may give (positive) or take (negative): non-zero, at most `itemLimit` either way.
    public static func isItemAmount(_ amount: Int64) -> Bool {
        amount != 0 && amount >= -itemLimit && amount <= itemLimit
    }
}

/// A grant that would take a user's balance past `CurrencyAmounts.balanceLimit` (or an amount no balance can take): refused
/// before anything of it was written, so that a caller inside a batch may answer it and go on.
public struct BalanceOutOfRange: Error, Sendable, Hashable, CustomStringConvertible {
    /// The reason word of the refusal (`purchase.rejected`, a dead letter).
    public static let reason = "balanceOutOfRange"

    public let currency: ItemCode
    /// The balance as it stood.
    public let balance: Int64
    /// What was to be added to it.
    public let amount: Int64

    public init(currency: ItemCode, balance: Int64, amount: Int64) {
        self.currency = currency
        self.balance = balance
        self.amount = amount
    }

    public var description: String {
        "a balance of \(currency) holds at most \(CurrencyAmounts.balanceLimit): it holds \(balance), and \(amount) more does not fit"
    }

    /// The first of `items`' currencies whose amount would take its balance in `balances` (absent: zero) out of range.
    public static func first(of items: [GrantItem], adding balances: [ItemCode: Int64]) -> BalanceOutOfRange? {
        var after = balances
        for item in items where item.kind == .currency {
            let balance = after[item.code] ?? 0
            guard let sum = CurrencyAmounts.balance(balance, adding: item.amount) else {
                return BalanceOutOfRange(currency: item.code, balance: balance, amount: item.amount)
            }
            after[item.code] = sum
        }
        return nil
    }
}

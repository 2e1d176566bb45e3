/// What a refund takes back of what a purchase gave. A full refund takes back everything. A prorated one (the App Store's
/// `REFUND_PRORATED`, whose `revocationPercentage` is the share refunded in thousandths of a percent) takes back that share
/// of each currency, rounded down, never more than the store gave back; an entitlement is taken back whole, as access ends
/// with any refund. A reversal of the refund gives back what it took.
public enum RefundShare {
    /// A whole purchase, in thousandths of a percent.
    public static let whole: Int64 = 100_000

    /// The amount of a currency item of `amount` that a refund of `share` (nil: all of it) takes back.
    public static func takenBack(_ amount: Int64, share: Int64?) -> Int64 {
        guard let share, share < whole else { return amount }
        guard share > 0, amount > 0 else { return 0 }
        return amount.multipliedReportingOverflow(by: share).overflow ? amount / whole * share : amount * share / whole
    }

    /// The share a refund of a signed transaction's `revocationType` and `revocationPercentage` takes back: nil (all of it)
    /// unless it is prorated and names a share.
    public static func of(revocationType: String?, revocationPercentage: Int64?) -> Int64? {
        guard revocationType == "REFUND_PRORATED", let share = revocationPercentage else { return nil }
        return min(max(share, 0), whole)
    }
}

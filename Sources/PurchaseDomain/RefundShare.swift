/// What a refund takes back of what a purchase gave. A full refund takes back everything. A prorated one (the App Store's
/// `REFUND_PRORATED`, whose `revocationPercentage` is the share refunded in thousandths of a percent) takes back that share
/// of each currency, rounded down, never more than the store gave back; a quantity-based partial refund of a multi-quantity
/// purchase (Google Play's `voidedQuantity`) takes back the refunded units' worth of each currency. An entitlement is taken
/// back whole, as access ends with any refund. A reversal of the refund gives back what it took.
public enum RefundShare {
    /// A whole purchase, in thousandths of a percent.
    public static let whole: Int64 = 100_000

    /// The part of a purchase a partial refund takes back.
    public enum Part: Sendable, Hashable, ExpressibleByIntegerLiteral {
        /// A prorated share, in thousandths of a percent.
        case share(Int64)
        /// So many units of the purchase's quantity.
        case units(Int)

        public init(integerLiteral share: Int64) { self = .share(share) }
    }

    /// The amount of a currency item of `amount` that a refund of `share` (nil: all of it) takes back.
    public static func takenBack(_ amount: Int64, share: Int64?) -> Int64 {
        guard let share, share < whole else { return amount }
        guard share > 0, amount > 0 else { return 0 }
        return amount.multipliedReportingOverflow(by: share).overflow ? amount / whole * share : amount * share / whole
    }

    /// The amount of a currency item of `amount`, given for a purchase of `quantity` units, that a refund of `part` (nil:
    /// all of it) takes back; of units, those units' worth, rounded down (all of it from `quantity` units on).
    public static func takenBack(_ amount: Int64, part: Part?, of quantity: Int) -> Int64 {
        switch part {
        case nil: return amount
        case .share(let share)?: return takenBack(amount, share: share)
        case .units(let units)?:
            guard units < quantity else { return amount }
            guard units > 0, amount > 0 else { return 0 }
            let (perUnit, remainder) = amount.quotientAndRemainder(dividingBy: Int64(quantity))
            return perUnit * Int64(units) + remainder * Int64(units) / Int64(quantity)
        }
    }

    /// The share a refund of a signed transaction's `revocationType` and `revocationPercentage` takes back: nil (all of it)
    /// unless it is prorated and names a share.
    public static func of(revocationType: String?, revocationPercentage: Int64?) -> Int64? {
        guard revocationType == "REFUND_PRORATED", let share = revocationPercentage else { return nil }
        return min(max(share, 0), whole)
    }

    /// The part a `purchase.revoked` refund names: its units (a quantity-based partial refund), else its share; nil: all.
    public static func part(share: Int64?, units: Int?) -> Part? {
        if let units { return .units(units) }
        return share.map(Part.share)
    }
}

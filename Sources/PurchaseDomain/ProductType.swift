/// What was bought, which decides what happens to a purchase after its grant.
///
/// Raw values are the catalog's and the database's spelling.
public enum ProductType: String, Codable, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Used up in the app (coins): finished when consumed; flagged at its store's deadline if not.
    case consumable
    /// Owned for good (ad-free): an entitlement, finished at its grant, never flagged.
    case nonConsumable
    /// An entitlement until `expiresDate`; renewals extend it, expiry, refunds and revocations end it.
    case autoRenewable
    /// An entitlement for the catalog's duration from the purchase.
    case nonRenewing
    /// Recorded before product types were kept, for a product the catalog does not name. Never flagged;
    /// reported until the catalog names it.
    case unknown

    public var description: String { rawValue }

    /// The App Store's `type` of a signed transaction.
    public init?(appStoreType: String) {
        switch appStoreType {
        case "Consumable": self = .consumable
        case "Non-Consumable": self = .nonConsumable
        case "Auto-Renewable Subscription": self = .autoRenewable
        case "Non-Renewing Subscription": self = .nonRenewing
        default: return nil
        }
    }

    /// What the purchase gives is an entitlement (owned), not an amount used up.
    public var isEntitlement: Bool {
        switch self {
        case .nonConsumable, .autoRenewable, .nonRenewing: true
        case .consumable, .unknown: false
        }
    }

    /// Only what is used up can be left unused: the only type flagged `refund.due` at the store's deadline.
    public var isFlaggedWhenUnconsumed: Bool { self == .consumable }
}

/// The store a purchase was made in. Its raw value is how events, the database, metrics and logs spell it.
public enum Store: String, Codable, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case appstore, appcoins, googleplay
    /// Web purchases paid through Stripe Checkout.
    case stripe

    public var description: String { rawValue }

    /// How the store is named to people (settings errors, logs, docs).
    public var displayName: String {
        switch self {
        case .appstore: "the App Store"
        case .appcoins: "AppCoins"
        case .googleplay: "Google Play"
        case .stripe: "Stripe"
        }
    }
}

/// What every effect is keyed by: the store and its transaction id. A repeat of the same key answers from what
/// was recorded and changes nothing.
public struct PurchaseKey: Hashable, Sendable, CustomStringConvertible {
    public var store: Store
    public var transactionId: TransactionID

    public init(store: Store, transactionId: TransactionID) {
        self.store = store
        self.transactionId = transactionId
    }

    public var description: String { "\(store.rawValue):\(transactionId)" }
}

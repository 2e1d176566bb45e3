import Foundation
import JSON
import PurchaseDomain

/// A purchase whose payment was proven, whatever the store: what the pipeline grants from.
public struct VerifiedPurchase: Sendable, Hashable, Codable {
    public var store: Store
    public var transactionId: TransactionID
    public var originalTransactionId: TransactionID?
    public var productId: ProductID
    /// The store's product type as it said it (App Store: e.g. `Consumable`); nil where the store does not say
    /// (receipts, AppCoins): the catalog says then.
    public var productType: String?
    public var quantity: Int
    public var purchaseDate: Date?
    public var signedDate: Date?
    public var appAccountToken: AccountToken?
    public var environment: String?
    /// In milliunits of `currency`, where the store says.
    public var price: Int64?
    public var currency: String?
    public var revocationDate: Date?
    public var revocationReason: Int64?
    public var expiresDate: Date?
    /// AppCoins and Google Play: whether the app consumed the one-time product already (on the device).
    public var consumed: Bool?
    /// Google Play: a subscription period acknowledged already (Google asks only a subscription's first purchase to be
    /// acknowledged, so a renewal reads acknowledged): nothing left to call the store for. Nil while it is not.
    public var acknowledged: Bool?
    /// The purchase token of the subscription this one was bought in place of (Google Play's `linkedPurchaseToken`: an
    /// upgrade, a downgrade, a re-signup), which it continues; nil for any other purchase.
    public var replacedPurchaseToken: PurchaseToken?
    /// Every field the store sent, including ones this version does not know.
    public var raw: [String: JSONValue]

    public init(_ transaction: AppStoreTransaction) {
        store = .appstore
        transactionId = transaction.transactionId
        originalTransactionId = transaction.originalTransactionId
        productId = transaction.productId
        productType = transaction.type?.rawValue
        quantity = transaction.quantity
        purchaseDate = transaction.purchaseDate
        signedDate = transaction.signedDate
        appAccountToken = transaction.appAccountToken
        environment = transaction.environment?.rawValue
        price = transaction.price
        currency = transaction.currency
        revocationDate = transaction.revocationDate
        revocationReason = transaction.revocationReason
        expiresDate = transaction.expiresDate
        raw = transaction.raw
    }

    /// One in-app purchase of a verified app receipt, in the environment the receipt's type names.
    public init?(_ purchase: InAppPurchaseReceipt, in receipt: AppReceipt) {
        guard let transactionId = purchase.transactionId, let productId = purchase.productId else { return nil }
        store = .appstore
        self.transactionId = transactionId
        originalTransactionId = purchase.originalTransactionId
        self.productId = productId
        productType = nil
        quantity = Int(purchase.quantity ?? 1)
        purchaseDate = purchase.purchaseDate
        signedDate = receipt.creationDate
        environment = receipt.environment?.rawValue
        revocationDate = purchase.cancellationDate
        expiresDate = purchase.expiresDate
        var raw: [String: JSONValue] = [:]
        if let id = purchase.webOrderLineItemId { raw["webOrderLineItemId"] = .integer(id) }
        if let bundleId = receipt.bundleId { raw["bundleId"] = .string(bundleId.rawValue) }
        self.raw = raw
    }

    public init(_ purchase: AppCoinsPurchase) {
        store = .appcoins
        transactionId = purchase.transactionId
        originalTransactionId = TransactionID(purchase.purchaseToken)
        productId = purchase.productId
        productType = nil
        quantity = 1
        purchaseDate = purchase.purchaseTime
        // The developer's free text (Unity's SDK puts JSON there, others an order id): an account token only when it is
        // one, a UUID as StoreKit's and a submission's are. Any other text would refuse every submission naming a token.
        appAccountToken = purchase.developerPayload.flatMap { UUID(uuidString: $0) == nil ? nil : AccountToken($0) }
        currency = purchase.currency
        consumed = purchase.isConsumed
        raw = purchase.raw
    }

    /// A Google Play one-time product purchase as the Android Publisher API reported it. `purchaseType` 0 (a license
    /// tester's purchase, never charged) is recorded in the environment `Test`; every other in `Production`.
    public init(_ purchase: GooglePlayProductPurchase) {
        store = .googleplay
        transactionId = purchase.transactionId
        originalTransactionId = TransactionID(purchase.purchaseToken)
        productId = purchase.productId
        productType = nil
        quantity = max(purchase.quantity, 1)
        purchaseDate = purchase.purchaseTime
        // Bound to an account as StoreKit's appAccountToken is when the app set the user's token (a UUID) as the billing
        // flow's obfuscatedAccountId; any other text (Google suggests a hash of the user id) binds nothing here.
        appAccountToken = purchase.obfuscatedExternalAccountId.flatMap { UUID(uuidString: $0) == nil ? nil : AccountToken($0) }
        environment = purchase.purchaseType == 0 ? "Test" : "Production"
        consumed = purchase.isConsumed
        raw = purchase.raw
    }
}

extension VerifiedPurchase {
    /// Whether the store holds it completed already (consumed, or acknowledged): nothing is left to call the store for.
    public var completedAtTheStore: Bool { consumed == true || acknowledged == true }

    /// Whether another user may hold this purchase's original, bought as `type` (a restore's, a renewal's, an upgrade's):
    /// an App Store transaction's, and any subscription's; an Android one-time purchase's original is its own token, which
    /// no other order shares.
    public func mayContinueAnothersOriginal(type: ProductType) -> Bool {
        switch store {
        case .appstore: true
        case .googleplay, .appcoins, .stripe: type == .autoRenewable
        }
    }

    /// A period of a Google Play subscription as the Android Publisher API reported it: its order is the transaction, its
    /// purchase token the original (renewals share it; `linkedPurchaseToken` is `replacedPurchaseToken`, which the
    /// verifier follows to the subscription it replaced). A license tester's is recorded in the environment `Test`.
    public init(_ subscription: GooglePlaySubscriptionPurchase) {
        store = .googleplay
        transactionId = subscription.transactionId
        originalTransactionId = TransactionID(subscription.purchaseToken)
        productId = subscription.productId
        productType = nil
        quantity = 1
        purchaseDate = subscription.startTime
        expiresDate = subscription.expiryTime
        appAccountToken = subscription.obfuscatedExternalAccountId.flatMap { UUID(uuidString: $0) == nil ? nil : AccountToken($0) }
        environment = subscription.isTest ? "Test" : "Production"
        replacedPurchaseToken = subscription.linkedPurchaseToken
        acknowledged = subscription.isAcknowledged ? true : nil
        raw = subscription.raw
    }
}

extension AppReceipt {
    /// The receipt's in-app purchases, or why they cannot be read: an entry without a transaction or product id (Apple
    /// documents both for every entry) is not skipped, since whoever submitted the receipt would then hear nothing
    /// about that purchase. Empty for a receipt that lists none (consumables leave it once finished).
    public var verifiedPurchases: Result<[VerifiedPurchase], Rejection> {
        var purchases: [VerifiedPurchase] = []
        purchases.reserveCapacity(inAppPurchases.count)
        for (index, entry) in inAppPurchases.enumerated() {
            guard let purchase = VerifiedPurchase(entry, in: self) else {
                return .failure(Rejection(.malformedReceipt, "in-app purchase \(index + 1) of \(inAppPurchases.count) has no "
                                          + (entry.transactionId == nil ? "transaction id" : "product id")))
            }
            purchases.append(purchase)
        }
        return .success(purchases)
    }
}

extension VerifiedPurchase {
    /// The purchase as its `Codable` conformance encodes it with ISO 8601 dates (`JSONEncoder.DateEncodingStrategy
    /// .iso8601`; absent fields left out), built directly: `iapctl verify --lines` writes one per line, and a
    /// `JSONEncoder` pass plus a parse cost more than the verification. A test holds the two to the same output.
    public var jsonValue: JSONValue {
        // Room for every field and a verdict beside them, made once rather than grown (and rehashed) field by field.
        var fields = [String: JSONValue](minimumCapacity: 20)
        fields["store"] = .string(store.rawValue)
        fields["transactionId"] = .string(transactionId.rawValue)
        fields["productId"] = .string(productId.rawValue)
        fields["quantity"] = .integer(Int64(quantity))
        fields["raw"] = .object(raw)
        func set(_ key: String, _ value: JSONValue?) { if let value { fields[key] = value } }
        func date(_ value: Date?) -> JSONValue? { value.map { .string(RFC3339.format($0, milliseconds: false)) } }
        set("originalTransactionId", originalTransactionId.map { .string($0.rawValue) })
        set("productType", productType.map(JSONValue.string))
        set("purchaseDate", date(purchaseDate))
        set("signedDate", date(signedDate))
        set("appAccountToken", appAccountToken.map { .string($0.rawValue) })
        set("environment", environment.map(JSONValue.string))
        set("price", price.map(JSONValue.integer))
        set("currency", currency.map(JSONValue.string))
        set("revocationDate", date(revocationDate))
        set("revocationReason", revocationReason.map(JSONValue.integer))
        set("expiresDate", date(expiresDate))
        set("consumed", consumed.map(JSONValue.bool))
        set("acknowledged", acknowledged.map(JSONValue.bool))
        return .object(fields)
    }
}

import Foundation

/// What each product of each store is and grants, from the catalog file (`ProductCatalog(contentsOf:schemas:)`, schema-checked). Products are
/// keyed by store and product id: an AppCoins SKU and an App Store product id are different namespaces.
///
/// - consumable: `amount` of `currency`, times the purchase's quantity;
/// - non-consumable: the `entitlement`, for good;
/// - auto-renewable: the `entitlement` until the transaction's `expiresDate`;
/// - non-renewing: the `entitlement` for `durationDays` from the purchase.
public struct ProductCatalog: Sendable {
    public struct Product: Sendable, Hashable {
        public var type: ProductType
        public var currency: ItemCode?
        public var amount: Int64?
        public var entitlement: ItemCode?
        public var durationDays: Int64?

        public init(type: ProductType, currency: ItemCode? = nil, amount: Int64? = nil, entitlement: ItemCode? = nil, durationDays: Int64? = nil) {
            self.type = type
            self.currency = currency
            self.amount = amount
            self.entitlement = entitlement
            self.durationDays = durationDays
        }
    }

    public let products: [Store: [ProductID: Product]]

    /// The products given, keyed by store and product id. Refuses two item codes that are one text in two Unicode
    /// spellings (é as one scalar or two): balances and entitlements are keyed by their code's bytes.
    public init(products: [Store: [ProductID: Product]]) throws {
        self.products = products
        if let (one, other) = Self.twoSpellings(in: [self]) {
            throw CatalogError("the item codes \(one.code.quotedWithHex) and \(other.code.quotedWithHex) are one text in two Unicode spellings: "
                               + "spell them alike, or name two items")
        }
    }

    /// Two item codes of `catalogs` (by the index of their catalog) that are one text in two Unicode spellings, if any:
    /// the database, and `ItemCode`, take them as two currencies (or entitlements) where an operator reads one.
    public static func twoSpellings(in catalogs: [ProductCatalog]) -> (one: (code: ItemCode, catalog: Int), other: (code: ItemCode, catalog: Int))? {
        // Keyed by String on purpose: canonically equivalent spellings meet in one entry.
        var seen: [String: (code: ItemCode, catalog: Int)] = [:]
        for (index, catalog) in catalogs.enumerated() {
            for code in catalog.itemCodes(.currency).union(catalog.itemCodes(.entitlement)).sorted() {
                if let first = seen[code.rawValue], code.isOtherSpelling(of: first.code) { return (first, (code, index)) }
                if seen[code.rawValue] == nil { seen[code.rawValue] = (code, index) }
            }
        }
        return nil
    }

    public func product(_ store: Store, _ productId: ProductID) -> Product? { products[store]?[productId] }

    /// The type of every product of `store` (to name the type of purchases recorded before types were kept).
    /// The codes of the currencies (or entitlements) some product of the catalog gives, on any store.
    public func itemCodes(_ kind: GrantItem.Kind) -> Set<ItemCode> {
        var codes: Set<ItemCode> = []
        for product in products.values.flatMap(\.values) {
            if let code = kind == .currency ? product.currency : product.entitlement { codes.insert(code) }
        }
        return codes
    }

    /// The Stripe prices this catalog sells (its `stripe` products), in byte order.
    public var stripePrices: [ProductID] { (products[.stripe] ?? [:]).keys.sorted { $0.rawValue.utf8.lexicographicallyPrecedes($1.rawValue.utf8) } }

    public func types(of store: Store) -> [ProductID: ProductType] { (products[store] ?? [:]).mapValues(\.type) }

    /// The items a purchase of `quantity` × `productId` grants; `nil` for a product not in the catalog.
    public func grants(store: Store, productId: ProductID, quantity: Int, purchaseDate: Date?, expiresDate: Date?) -> [GrantItem]? {
        guard let product = product(store, productId) else { return nil }
        switch product.type {
        case .consumable:
            guard let currency = product.currency, let amount = product.amount else { return nil }
            let (total, overflow) = amount.multipliedReportingOverflow(by: Int64(max(quantity, 1)))
            return overflow ? nil : [.currency(currency, total)]
        case .nonConsumable:
            return product.entitlement.map { [.entitlement($0)] }
        case .autoRenewable:
            return product.entitlement.map { [.entitlement($0, until: expiresDate)] }
        case .nonRenewing:
            guard let entitlement = product.entitlement, let days = product.durationDays, let start = purchaseDate else { return nil }
            // Never past the last date an event can name (9999-12-31): a pass bought in its last days ends then.
            return [.entitlement(entitlement, until: min(start.addingTimeInterval(TimeInterval(days) * 86_400), EpochMilliseconds.latestDate))]
        case .unknown:
            return nil
        }
    }
}

public struct CatalogError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

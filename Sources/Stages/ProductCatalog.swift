import Foundation
import JSON
import JSONSchema
import PurchaseDomain
import PurchaseStore

/// What each product of each store is and grants, from the catalog file (schema-checked when loaded). Products are
/// keyed by store and product id: an AppCoins SKU and an App Store product id are different namespaces.
///
/// - consumable: `amount` of `currency`, times the purchase's quantity;
/// - non-consumable: the `entitlement`, for good;
/// - auto-renewable: the `entitlement` until the transaction's `expiresDate`;
/// - non-renewing: the `entitlement` for `durationDays` from the purchase.
public struct ProductCatalog: Sendable {
    public struct Product: Sendable, Hashable {
        public var type: ProductType
        public var currency: String?
        public var amount: Int64?
        public var entitlement: String?
        public var durationDays: Int64?
    }

    public let products: [Store: [ProductID: Product]]

    public static let schemaID = "urn:iap-pipeline:schema:catalog:v1"

    /// Parses and validates a catalog document.
    public init(json data: Data, schemas: JSONSchemaRegistry) throws {
        guard let document = JSONValue.parse(Array(data)) else { throw CatalogError("the catalog is not valid JSON") }
        let violations = schemas.validate(document, against: Self.schemaID)
        guard violations.isEmpty else { throw CatalogError("the catalog does not match its schema: \(violations.map(\.description).joined(separator: "; "))") }
        let sections = document.objectValue ?? [:]
        guard sections["products"] == nil || sections["appstore"] == nil else {
            throw CatalogError("the catalog has both \"products\" and \"appstore\": both name the App Store's products; keep one")
        }
        var products: [Store: [ProductID: Product]] = [:]
        for (name, section) in sections {
            let store: Store = name == "products" ? .appstore : Store(rawValue: name) ?? .appstore
            for (id, entry) in section.objectValue ?? [:] {
                guard let fields = entry.objectValue, let type = fields["type"]?.stringValue.flatMap(ProductType.init(rawValue:)) else { continue }
                products[store, default: [:]][ProductID(id)] = Product(type: type, currency: fields["currency"]?.stringValue, amount: fields["amount"]?.int64Value,
                                                            entitlement: fields["entitlement"]?.stringValue, durationDays: fields["durationDays"]?.int64Value)
            }
        }
        // Item codes key balances and entitlements as `String`s, which take two spellings of one text as equal (é as one
        // scalar or two); the database takes them as two. The catalog is where they come from: it keeps them apart.
        var codes: [String: String] = [:]
        for product in products.values.flatMap(\.values) {
            for code in [product.currency, product.entitlement].compactMap({ $0 }) {
                if let spelled = codes[code], !spelled.utf8.elementsEqual(code.utf8) {
                    throw CatalogError("the item codes '\(spelled)' and '\(code)' are one text in two Unicode spellings: spell them alike, or name two items")
                }
                codes[code] = code
            }
        }
        self.products = products
    }

    public init(contentsOf url: URL, schemas: JSONSchemaRegistry) throws {
        try self.init(json: try Data(contentsOf: url), schemas: schemas)
    }

    public func product(_ store: Store, _ productId: ProductID) -> Product? { products[store]?[productId] }

    /// The type of every product of `store` (to name the type of purchases recorded before types were kept).
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
            return [.entitlement(entitlement, until: start.addingTimeInterval(TimeInterval(days) * 86_400))]
        case .unknown:
            return nil
        }
    }
}

public struct CatalogError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

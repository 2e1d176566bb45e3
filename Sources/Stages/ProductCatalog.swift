import Foundation
import JSON
import JSONSchema
import PurchaseStore

/// What each product grants, from the catalog file (schema-checked when loaded).
///
/// - consumable: `amount` of `currency`, times the purchase's quantity;
/// - non-consumable: the `entitlement`, for good;
/// - auto-renewable: the `entitlement` until the transaction's `expiresDate`.
public struct ProductCatalog: Sendable {
    public enum ProductType: String, Sendable { case consumable, nonConsumable, autoRenewable }

    public struct Product: Sendable, Hashable {
        public var type: ProductType
        public var currency: String?
        public var amount: Int64?
        public var entitlement: String?
    }

    public let products: [String: Product]

    public static let schemaID = "urn:iap-pipeline:schema:catalog:v1"

    /// Parses and validates a catalog document.
    public init(json data: Data, schemas: JSONSchemaRegistry) throws {
        guard let document = JSONValue.parse(Array(data)) else { throw CatalogError("the catalog is not valid JSON") }
        let violations = schemas.validate(document, against: Self.schemaID)
        guard violations.isEmpty else { throw CatalogError("the catalog does not match its schema: \(violations.map(\.description).joined(separator: "; "))") }
        var products: [String: Product] = [:]
        for (id, entry) in document.objectValue?["products"]?.objectValue ?? [:] {
            guard let fields = entry.objectValue, let type = fields["type"]?.stringValue.flatMap(ProductType.init(rawValue:)) else { continue }
            products[id] = Product(type: type, currency: fields["currency"]?.stringValue, amount: fields["amount"]?.int64Value,
                                   entitlement: fields["entitlement"]?.stringValue)
        }
        self.products = products
    }

    public init(contentsOf url: URL, schemas: JSONSchemaRegistry) throws {
        try self.init(json: try Data(contentsOf: url), schemas: schemas)
    }

    /// The items a purchase of `quantity` × `productId` grants; `nil` for a product not in the catalog.
    public func grants(productId: String, quantity: Int, expiresDate: Date?) -> [GrantItem]? {
        guard let product = products[productId] else { return nil }
        switch product.type {
        case .consumable:
            guard let currency = product.currency, let amount = product.amount else { return nil }
            let (total, overflow) = amount.multipliedReportingOverflow(by: Int64(max(quantity, 1)))
            return overflow ? nil : [.currency(currency, total)]
        case .nonConsumable:
            return product.entitlement.map { [.entitlement($0)] }
        case .autoRenewable:
            return product.entitlement.map { [.entitlement($0, until: expiresDate)] }
        }
    }
}

public struct CatalogError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

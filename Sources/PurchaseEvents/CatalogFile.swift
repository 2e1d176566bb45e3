import Foundation
import JSON
import JSONSchema
import PurchaseDomain

/// The catalog file an operator writes (`schemas/catalog.v1.schema.json`): one section per store (`appstore`, `appcoins`, `googleplay`;
/// `products` is the App Store's, as in catalogs written before stores had sections), each a map of product ids.
extension ProductCatalog {
    public static let schemaID = "urn:iap-pipeline:schema:catalog:v1"

    /// Parses and validates a catalog document.
    public init(json data: Data, schemas: JSONSchemaRegistry) throws {
        guard let document = JSONValue.parse(Array(data)) else { throw CatalogError("the catalog is not valid JSON") }
        try self.init(document: document, schemas: schemas)
    }

    /// The store each section of a catalog names the products of: its own name, or `products` (the App Store's, as
    /// catalogs named them before other stores were sold in).
    private static let sectionStores = Dictionary(uniqueKeysWithValues: Store.allCases.map { ($0.rawValue, $0) }).merging(["products": .appstore]) { own, _ in own }

    /// Validates and reads a catalog already parsed (one written inside an apps file).
    public init(document: JSONValue, schemas: JSONSchemaRegistry) throws {
        let violations = schemas.validate(document, against: Self.schemaID)
        guard violations.isEmpty else { throw CatalogError("the catalog does not match its schema: \(violations.map(\.description).joined(separator: "; "))") }
        let sections = document.objectValue ?? [:]
        guard sections["products"] == nil || sections["appstore"] == nil else {
            throw CatalogError("the catalog has both \"products\" and \"appstore\": both name the App Store's products; keep one")
        }
        var products: [Store: [ProductID: Product]] = [:]
        for (name, section) in sections {
            guard let store = Self.sectionStores[name] else { continue } // the schema admits no other section
            for (id, entry) in section.objectValue ?? [:] {
                guard let fields = entry.objectValue, let type = fields["type"]?.stringValue.flatMap(ProductType.init(rawValue:)) else { continue }
                products[store, default: [:]][ProductID(id)] = Product(type: type, currency: fields["currency"]?.stringValue.map { ItemCode($0) }, amount: fields["amount"]?.int64Value,
                                                                       entitlement: fields["entitlement"]?.stringValue.map { ItemCode($0) }, durationDays: fields["durationDays"]?.int64Value)
            }
        }
        try self.init(products: products)
    }

    public init(contentsOf url: URL, schemas: JSONSchemaRegistry) throws {
        try self.init(json: try Data(contentsOf: url), schemas: schemas)
    }
}

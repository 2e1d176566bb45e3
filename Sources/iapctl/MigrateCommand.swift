import CommandLineOptions
import Foundation
import JSONSchema
import PurchaseDomain
import PurchaseStore

/// `iapctl migrate --store URL [--password-file F] [--catalog FILE]`: applies the purchase store's missing schema
/// migrations; with a catalog, names the product type of purchases recorded before types were kept.
enum MigrateCommand {
    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--store", "--password-file", "--catalog"])
        guard let store = try IAPCtl.store(options) else { throw UsageError("migrate: --store URL (or IAP_STORE_URL) is required") }
        let applied = try await store.migrate()
        print(applied.isEmpty ? "\(store.location): up to date" : "\(store.location): applied \(applied.map { "v\($0)" }.joined(separator: ", "))")
        if let path = options.string("--catalog") ?? ProcessInfo.processInfo.environment["IAP_CATALOG"] {
            let catalog: ProductCatalog
            do {
                catalog = try ProductCatalog(contentsOf: URL(fileURLWithPath: path), schemas: try JSONSchemaRegistry.eventSchemas())
            } catch let error as CatalogError {
                throw UsageError("migrate: --catalog \(path): \(error)")
            }
            for storeName in Store.allCases {
                let named = try await store.assignProductTypes(catalog.types(of: storeName), store: storeName)
                if named > 0 { print("\(storeName): named the product type of \(named) purchases from the catalog") }
            }
        }
        let unknown = try await store.openStatistics().unknownProductType
        if unknown > 0 {
            print("\(unknown) purchases have an unknown product type (never flagged for refund): add their products to the catalog, then run migrate --catalog")
        }
        return 0
    }
}

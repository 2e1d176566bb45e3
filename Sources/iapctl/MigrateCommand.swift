import Foundation
import PurchaseStore

/// `iapctl migrate --store URL`: applies the purchase store's missing schema migrations.
enum MigrateCommand {
    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--store"])
        guard let url = options.string("--store") ?? ProcessInfo.processInfo.environment["IAP_STORE_URL"] else {
            throw UsageError("migrate: --store URL (or IAP_STORE_URL) is required")
        }
        let store = try SQLPurchaseStore(url: url)
        let applied = try await store.migrate()
        print(applied.isEmpty ? "\(store.location): up to date" : "\(store.location): applied \(applied.map { "v\($0)" }.joined(separator: ", "))")
        return 0
    }
}

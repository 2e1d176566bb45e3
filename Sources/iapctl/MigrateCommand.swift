import Foundation
import PurchaseStore

/// `iapctl migrate --store URL [--password-file F]`: applies the purchase store's missing schema migrations.
enum MigrateCommand {
    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--store", "--password-file"])
        guard let url = options.string("--store") ?? ProcessInfo.processInfo.environment["IAP_STORE_URL"] else {
            throw UsageError("migrate: --store URL (or IAP_STORE_URL) is required")
        }
        let password = try (options.string("--password-file") ?? ProcessInfo.processInfo.environment["IAP_STORE_PASSWORD_FILE"])
            .map(SQLPurchaseStore.password(fromFile:))
        let store = try SQLPurchaseStore(url: url, password: password)
        let applied = try await store.migrate()
        print(applied.isEmpty ? "\(store.location): up to date" : "\(store.location): applied \(applied.map { "v\($0)" }.joined(separator: ", "))")
        return 0
    }
}

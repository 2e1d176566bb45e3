import Foundation
import JSON
import PurchaseStore

/// `iapctl user USER --store URL [--password-file F]`: what a user owns, as one JSON object (the shape apps get).
enum UserCommand {
    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--store", "--password-file"])
        guard let userId = options.positional.first, options.positional.count == 1 else { throw UsageError("user: name one user id") }
        guard let url = options.string("--store") ?? ProcessInfo.processInfo.environment["IAP_STORE_URL"] else {
            throw UsageError("user: --store URL (or IAP_STORE_URL) is required")
        }
        let password = try (options.string("--password-file") ?? ProcessInfo.processInfo.environment["IAP_STORE_PASSWORD_FILE"])
            .map(SQLPurchaseStore.password(fromFile:))
        let holdings = try await SQLPurchaseStore(url: url, password: password).holdings(of: userId)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(RFC3339.format(date))
        }
        print(String(decoding: try encoder.encode(holdings), as: UTF8.self))
        return 0
    }
}

import PurchaseDomain
import CommandLineOptions
import Foundation
import Ingest
import PurchaseStore

/// `iapctl user USER (--store URL [--password-file F] | --ingest URL [--read-secret-file F] [--sync])`: what a user owns,
/// as one JSON object — read from the store, or asked of `iap-ingest`'s `GET /v1/users/{userId}` as an app's
/// backend asks it (signed when a secret is given). With `--sync`, asks the ingest to sync the user with the App Store
/// first (`POST /v1/users/{userId}/sync`) and prints its answer.
enum UserCommand {
    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--store", "--password-file", "--ingest", "--read-secret-file"], flags: ["--sync"])
        guard let userId = options.positional.first, options.positional.count == 1 else { throw UsageError("user: name one user id") }
        if let ingest = options.string("--ingest") {
            let secret = try options.string("--read-secret-file").map { path -> Data in
                guard let contents = SharedSecret.read(file: path) else { throw UsageError("--read-secret-file: cannot read \(path)") }
                return contents
            }
            let status: Int, body: Data
            do {
                (status, body) = try await UserHoldingsAPI.fetch(userId, ingest: ingest, secret: secret, sync: options.flags.contains("--sync"))
            } catch let error as URLError where error.code == .badURL {
                throw UsageError("--ingest: not a URL: \(ingest)")
            }
            print(String(decoding: body, as: UTF8.self))
            return (200...202).contains(status) ? 0 : 1
        }
        if options.flags.contains("--sync") { throw UsageError("user: --sync goes with --ingest URL (the ingest holds the App Store Server API key)") }
        guard let url = options.string("--store") ?? ProcessInfo.processInfo.environment["IAP_STORE_URL"] else {
            throw UsageError("user: --store URL (or IAP_STORE_URL) or --ingest URL is required")
        }
        let password = try (options.string("--password-file") ?? ProcessInfo.processInfo.environment["IAP_STORE_PASSWORD_FILE"])
            .map(SQLPurchaseStore.password(fromFile:))
        let holdings = try await SQLPurchaseStore(url: url, password: password).holdings(of: UserID(userId))
        print(String(decoding: try UserHoldingsAPI.encode(holdings), as: UTF8.self))
        return 0
    }
}

import CommandLineOptions
import Crypto
import Foundation
import JSON
import PurchaseDomain
import PurchaseStore
import StoreVerification

/// `iapctl appstore order ORDER_ID`: the transactions of the order a customer quotes (*Look Up Order ID*), each verified
/// against Apple's chain and, with a store, with its owner and state in the pipeline — which user a support ticket's
/// order belongs to.
enum AppStoreOrderCommand {
    static let usage = """
        usage: iapctl appstore order ORDER_ID [--store URL] [--password-file F] [--root FILE]... [--app-apple-id N] [--environment ENV]
                                     [--api-url URL] [--key-id ID] [--issuer-id ID] [--private-key FILE] [--bundle-id ID]
          Asks Look Up Order ID for the order a customer quotes from the App Store's receipt e-mail, verifies each of its
          transactions, and prints one JSON object: the order's status and each transaction with its owner and state in
          the pipeline (with --store). Exits 0 for a valid order, 1 for an invalid one or a failure.
          Settings default to the workers' environment variables: IAP_STORE_URL, IAP_STORE_PASSWORD_FILE,
          IAP_ROOT_CERTIFICATES (comma-separated), IAP_APP_APPLE_ID, IAP_ENVIRONMENT (Production), and those of
          `iapctl appstore test-notification`.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--store", "--password-file", "--root", "--app-apple-id", "--environment", "--api-url", "--key-id",
                                                             "--issuer-id", "--private-key", "--bundle-id"])
        guard let orderId = options.positional.first, options.positional.count == 1 else { throw UsageError("appstore order: name one order id\n\(usage)") }
        let environment = ProcessInfo.processInfo.environment
        let client = try AppStoreCommand.client(options)
        let roots = try (options.values["--root"] ?? environment["IAP_ROOT_CERTIFICATES"].map { $0.split(separator: ",").map(String.init) } ?? [])
            .flatMap { path -> [Certificate] in
                guard let data = FileManager.default.contents(atPath: path.trimmingCharacters(in: .whitespaces)) else {
                    throw UsageError("appstore order: cannot read root certificate \(path)")
                }
                return try Certificate.load(pemOrDER: data)
            }
        guard !roots.isEmpty else { throw UsageError("appstore order: --root (or IAP_ROOT_CERTIFICATES) is required: the App Store's answer is verified") }
        let appAppleId = try (options.string("--app-apple-id") ?? environment["IAP_APP_APPLE_ID"]).map { text -> Int64 in
            guard let id = Int64(text) else { throw UsageError("appstore order: --app-apple-id must be a number") }
            return id
        }
        let verifier = try SignedDataVerifier(configuration: .init(
            trustedRoots: roots, bundleId: BundleID(try AppStoreCommand.setting(options, "--bundle-id", "IAP_BUNDLE_ID")),
            environment: AppStoreEnvironment(rawValue: options.string("--environment") ?? environment["IAP_ENVIRONMENT"] ?? "Production"),
            appAppleId: appAppleId))
        let store = try IAPCtl.store(options)

        let lookup: OrderLookup
        switch await client.lookUpOrder(orderId) {
        case .success(let answer): lookup = answer
        case .failure(let failure):
            print(report(["orderId": .string(orderId), "error": .string("\(failure)")]))
            return 1
        }
        var transactions: [JSONValue] = []
        for signed in lookup.signedTransactions {
            switch verifier.verifyTransaction(signed) {
            case .failure(let rejection):
                transactions.append(.object(["rejected": .object(["reason": .string(rejection.reason.rawValue), "detail": .string(rejection.detail)])]))
            case .success(let transaction):
                var fields: [String: JSONValue] = [
                    "transactionId": .string(transaction.transactionId.rawValue), "productId": .string(transaction.productId.rawValue),
                    "originalTransactionId": transaction.originalTransactionId.map { .string($0.rawValue) } ?? .null,
                    "purchaseDate": transaction.purchaseDate.map { .string(RFC3339.format($0)) } ?? .null,
                    "revocationDate": transaction.revocationDate.map { .string(RFC3339.format($0)) } ?? .null,
                ]
                if let store {
                    let record = try await store.purchase(PurchaseKey(store: .appstore, transactionId: transaction.transactionId))
                    fields["pipeline"] = record.map { record in
                        .object(["userId": .string(record.userId.rawValue), "state": .string(record.state.rawValue),
                                 "app": record.app.map { .string($0.rawValue) } ?? .null])
                    } ?? .null
                }
                transactions.append(.object(fields))
            }
        }
        let status: JSONValue = switch lookup.status {
        case .valid: .string("valid")
        case .invalid: .string("invalid")
        case .other(let raw): .integer(raw)
        }
        print(report(["orderId": .string(orderId), "status": status, "transactions": .array(transactions)]))
        return lookup.status == .valid ? 0 : 1
    }

    private static func report(_ fields: [String: JSONValue]) -> String { String(decoding: JSONValue.object(fields).serialized, as: UTF8.self) }
}

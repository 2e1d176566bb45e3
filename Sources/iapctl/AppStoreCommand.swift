import CommandLineOptions
import Crypto
import Foundation
import JSON
import PurchaseDomain
import StoreVerification

/// `iapctl appstore test-notification`: asks the App Store to send a `TEST` notification to the app's server URL and
/// reports whether it arrived (answered 200), so that an operator can check the webhook path end to end.
enum AppStoreCommand {
    static let usage = """
        usage: iapctl appstore test-notification [--api-url URL] [--key-id ID] [--issuer-id ID] [--private-key FILE] [--bundle-id ID]
                                                 [--timeout SECONDS]
          Requests a TEST notification (App Store Server API) and waits for the App Store's attempt to post it to the URL
          set in App Store Connect; prints one JSON object and exits 0 when it was delivered, 1 when not.
          Settings default to the workers' environment variables: IAP_APPSTORE_API_URL, IAP_APPSTORE_KEY_ID,
          IAP_APPSTORE_ISSUER_ID, IAP_APPSTORE_PRIVATE_KEY_FILE, IAP_BUNDLE_ID. --timeout: 60.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        switch arguments.first {
        case "test-notification": return try await testNotification(Array(arguments.dropFirst()))
        case "order": return try await AppStoreOrderCommand.run(Array(arguments.dropFirst()))
        default: throw UsageError("appstore: the command is test-notification or order\n\(usage)\n\(AppStoreOrderCommand.usage)")
        }
    }

    /// A setting of `options`, else of the environment `variable`; required.
    static func setting(_ options: CommandOptions, _ flag: String, _ variable: String) throws -> String {
        guard let value = options.string(flag) ?? ProcessInfo.processInfo.environment[variable], !value.isEmpty else {
            throw UsageError("appstore: \(flag) (or \(variable)) is required")
        }
        return value
    }

    /// The App Store Server API client of `options` (`--api-url`, `--key-id`, `--issuer-id`, `--private-key`, `--bundle-id`).
    static func client(_ options: CommandOptions) throws -> AppStoreServerAPIClient {
        guard let url = URL(string: try setting(options, "--api-url", "IAP_APPSTORE_API_URL")) else { throw UsageError("appstore: --api-url is not a URL") }
        let keyPath = try setting(options, "--private-key", "IAP_APPSTORE_PRIVATE_KEY_FILE")
        guard let pem = FileManager.default.contents(atPath: keyPath) else { throw UsageError("appstore: cannot read --private-key \(keyPath)") }
        return AppStoreServerAPIClient(configuration: .init(
            baseURL: url, keyId: try setting(options, "--key-id", "IAP_APPSTORE_KEY_ID"), issuerId: try setting(options, "--issuer-id", "IAP_APPSTORE_ISSUER_ID"),
            bundleId: BundleID(try setting(options, "--bundle-id", "IAP_BUNDLE_ID")), privateKey: try PrivateKey(pem: pem)))
    }

    private static func testNotification(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--api-url", "--key-id", "--issuer-id", "--private-key", "--bundle-id", "--timeout"])
        let timeout = try options.int("--timeout", in: 1...86_400) ?? 60
        let client = try client(options)

        let token: String
        switch await client.requestTestNotification() {
        case .success(let value): token = value
        case .failure(let failure):
            print(report(["error": .string("\(failure)")]))
            return 1
        }
        // Get Test Notification Status allows one call a second: asked every two.
        let deadline = ContinuousClock.now + .seconds(timeout)
        var last: TestNotificationStatus?
        while ContinuousClock.now < deadline {
            try await Task.sleep(for: .seconds(2))
            if case .success(let status) = await client.testNotificationStatus(token), !status.attempts.isEmpty {
                last = status
                break
            }
        }
        let attempts = (last?.attempts ?? []).map { attempt in
            JSONValue.object(["date": attempt.date.map { .string(RFC3339.format($0)) } ?? .null, "result": .string(attempt.result)])
        }
        print(report(["testNotificationToken": .string(token), "delivered": .bool(last?.delivered == true), "attempts": .array(attempts)]))
        return last?.delivered == true ? 0 : 1
    }

    private static func report(_ fields: [String: JSONValue]) -> String { String(decoding: JSONValue.object(fields).serialized, as: UTF8.self) }
}

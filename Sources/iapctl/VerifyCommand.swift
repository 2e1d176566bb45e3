import PurchaseDomain
import CommandLineOptions
import Crypto
import Foundation
import StoreVerification
import JSON

/// `iapctl verify`: verifies store payloads by hand, one JSON verdict per payload.
enum VerifyCommand {
    static let usage = """
        iapctl verify [--kind transaction|renewal|notification|app-transaction|receipt|appcoins] [--root FILE]... [--receipt-root FILE]...
                      [--bundle-id ID] [--environment Production|Sandbox|Xcode|LocalTesting] [--app-apple-id N]
                      [--allow-unsigned-test-data] [--online-checks] [--appcoins-url URL] [--appcoins-app PACKAGE=FILE]... [--lines] [FILE|-]
          Prints {"verdict":"verified",...} or {"verdict":"rejected","reason":...,"retryable":...}.
          --root: roots of signed data (Apple Root CA - G3); --receipt-root: roots of receipts (Apple Inc. Root).
          Xcode and LocalTesting data are not signed: those environments need --allow-unsigned-test-data.
          appcoins input: {"packageName":...,"sku":...,"purchaseToken":...}
          Exit 0 verified (all, with --lines), 1 rejected, 2 usage or I/O error.
        """

    enum Kind: String, CaseIterable {
        case transaction, renewal, notification, appTransaction = "app-transaction", receipt, appcoins
    }

    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--kind", "--root", "--receipt-root", "--bundle-id", "--environment", "--app-apple-id",
                                                             "--appcoins-url", "--appcoins-app"],
                                         flags: ["--online-checks", "--lines", "--allow-unsigned-test-data"])
        let kindName = options.string("--kind") ?? "transaction"
        guard let kind = Kind(rawValue: kindName) else {
            throw UsageError("--kind must be one of \(Kind.allCases.map(\.rawValue).joined(separator: ", ")), got '\(kindName)'")
        }
        guard options.positional.count <= 1 else { throw UsageError("verify takes at most one input file") }
        let path = options.positional.first ?? "-"
        let verify = try makeVerifier(kind, options)
        guard options.flags.contains("--lines") else {
            let verdict = await verify(Array(try readCommandInput(path).trimmingCharacters(in: .whitespacesAndNewlines).utf8)[...])
            print(JSONValue.object(verdict).serializedText)
            return verdict["verdict"] == .string("verified") ? 0 : 1
        }
        // Lines: read in blocks, split and trimmed as bytes (a Character walk over megabytes of JWS cost more than
        // verifying them); verdicts written in blocks.
        let lines = try InputLines(path: path)
        var allVerified = true
        var output: [UInt8] = []
        output.reserveCapacity(1 << 17)
        while let line = try lines.next() {
            let payload = InputLines.trimmingBlanks(line)
            guard !payload.isEmpty else { continue }
            let verdict = await verify(payload)
            if verdict["verdict"] != .string("verified") { allVerified = false }
            JSONValue.object(verdict).write(to: &output)
            output.append(UInt8(ascii: "\n"))
            if output.count >= 1 << 16 {
                FileHandle.standardOutput.write(Data(output))
                output.removeAll(keepingCapacity: true)
            }
        }
        FileHandle.standardOutput.write(Data(output))
        return allVerified ? 0 : 1
    }

    /// A payload's bytes → its verdict. Bytes, not text: a signed transaction is verified from them as they are read.
    private typealias Verify = @Sendable (ArraySlice<UInt8>) async -> [String: JSONValue]

    /// The payload as text for the verifiers that take it, or its verdict when it is not UTF-8.
    private static func text(_ bytes: ArraySlice<UInt8>, _ verify: (String) -> [String: JSONValue]) -> [String: JSONValue] {
        guard let text = String(validating: bytes, as: UTF8.self) else { return rejected(Rejection(.malformedPayload, "the payload is not UTF-8")) }
        return verify(text)
    }

    private static func makeVerifier(_ kind: Kind, _ options: CommandOptions) throws -> Verify {
        if case .appcoins = kind {
            var configuration = AppCoinsVerifier.Configuration()
            if let url = options.string("--appcoins-url") {
                guard let parsed = URL(string: url) else { throw UsageError("--appcoins-url is not a URL") }
                configuration.baseURL = parsed
            }
            // As the verifier does: only the named apps, their signature checked before the store's API is asked.
            do { configuration.apps = try AndroidPurchaseData.apps(fromEntries: options.values["--appcoins-app"] ?? []) } catch {
                throw UsageError("--appcoins-app: \(error)")
            }
            guard !configuration.apps.isEmpty else { throw UsageError("--kind appcoins needs --appcoins-app PACKAGE=FILE (the app's public key)") }
            let verifier = AppCoinsVerifier(configuration: configuration)
            return { line in
                guard let fields = JSONValue.parse(line)?.objectValue, let data = fields["purchaseData"]?.stringValue,
                      let signature = fields["signature"]?.stringValue, let (package, sku, token) = AndroidPurchaseData.names(in: data)
                else { return rejected(Rejection(.signatureRequired, "expected {\"purchaseData\": \"<the SDK's purchase JSON>\", \"signature\": \"<base64>\"}")) }
                return verdict(await verifier.verifySigned(packageName: package, sku: sku, purchaseToken: token, purchaseData: data, signature: signature)
                    .map(VerifiedPurchase.init))
            }
        }
        guard let bundleId = options.string("--bundle-id") else { throw UsageError("--bundle-id is required for \(kind.rawValue)") }
        let environment = AppStoreEnvironment(rawValue: options.string("--environment") ?? "Production")
        guard AppStoreEnvironment.configurable.contains(environment) else { throw UsageError("--environment must be Production, Sandbox, Xcode or LocalTesting") }
        let allowUnsigned = options.flags.contains("--allow-unsigned-test-data")
        switch environment.unsignedTestDataProblem(allowed: allowUnsigned) {
        case nil: break
        case .permissionMissing?: throw UsageError("--environment \(environment) accepts data nobody signed: add --allow-unsigned-test-data")
        case .permissionMisplaced?: throw UsageError("--allow-unsigned-test-data is only for --environment Xcode or LocalTesting")
        }
        // Receipts and signed data chain to different Apple roots: each kind takes only its own option.
        let rootOption = kind == .receipt ? "--receipt-root" : "--root"
        let otherOption = kind == .receipt ? "--root" : "--receipt-root"
        guard options.values[otherOption] == nil else { throw UsageError("--kind \(kind.rawValue) takes \(rootOption), not \(otherOption)") }
        let roots = try (options.values[rootOption] ?? []).flatMap { path -> [Certificate] in
            guard let data = FileManager.default.contents(atPath: path) else { throw UsageError("cannot read root certificate \(path)") }
            return try Certificate.load(pemOrDER: data)
        }
        let appAppleId = try options.string("--app-apple-id").map { text -> Int64 in
            guard let id = Int64(text) else { throw UsageError("--app-apple-id must be a number") }
            return id
        }
        let online = options.flags.contains("--online-checks")
        if kind == .receipt {
            let verifier = try ReceiptVerifier(configuration: .init(trustedRoots: roots, bundleId: BundleID(bundleId), environment: environment, onlineChecks: online,
                                                                    allowsUnsignedTestData: allowUnsigned))
            return { bytes in
                text(bytes) { payload in
                    verdict(verifier.verify(base64: payload).flatMap { receipt in
                        receipt.verifiedPurchases.map { purchases in
                            ReceiptVerdict(receiptType: receipt.receiptType, bundleId: receipt.bundleId, appVersion: receipt.appVersion,
                                           creationDate: receipt.creationDate, purchases: purchases)
                        }
                    })
                }
            }
        }
        let verifier = try SignedDataVerifier(configuration: .init(
            trustedRoots: roots, bundleId: BundleID(bundleId), environment: environment, appAppleId: appAppleId, onlineChecks: online,
            allowsUnsignedTestData: allowUnsigned))
        return { bytes in
            switch kind {
            case .transaction: verdict(verifier.verifyTransaction(utf8: Array(bytes)).map(VerifiedPurchase.init), fields: \.jsonValue)
            case .renewal: text(bytes) { verdict(verifier.verifyRenewalInfo($0).map(\.raw)) }
            case .appTransaction: text(bytes) { verdict(verifier.verifyAppTransaction($0).map(\.raw)) }
            case .notification:
                text(bytes) { payload in
                    verdict(verifier.verifyNotification(payload).map { notification in
                        NotificationVerdict(notificationType: notification.notificationType.rawValue, subtype: notification.subtype,
                                            notificationUUID: notification.notificationUUID, action: notification.action.rawValue,
                                            transaction: notification.transaction.map(VerifiedPurchase.init))
                    })
                }
            case .receipt, .appcoins: rejected(Rejection(.malformedPayload, "unreachable"))
            }
        }
    }

    private struct ReceiptVerdict: Encodable {
        let receiptType: String?
        let bundleId: BundleID?
        let appVersion: String?
        let creationDate: Date?
        let purchases: [VerifiedPurchase]
    }

    private struct NotificationVerdict: Encodable {
        let notificationType: String
        let subtype: String?
        let notificationUUID: String
        let action: String
        let transaction: VerifiedPurchase?
    }

    /// `{"verdict":"verified", …fields}` or `{"verdict":"rejected","reason",…}`.
    private static func verdict<T: Encodable>(_ result: Result<T, Rejection>) -> [String: JSONValue] {
        verdict(result) { value in
            do {
                return try JSONValueEncoder().encode(value)
            } catch {
                return .object(["encodingError": .string("\(error)")])
            }
        }
    }

    /// The same, with the fields of a verified value made by `fields`.
    private static func verdict<T>(_ result: Result<T, Rejection>, fields makeFields: (T) -> JSONValue) -> [String: JSONValue] {
        switch result {
        case .failure(let rejection): return rejected(rejection)
        case .success(let value):
            var fields = makeFields(value).objectValue ?? [:]
            fields["verdict"] = .string("verified")
            return fields
        }
    }

    private static func rejected(_ rejection: Rejection) -> [String: JSONValue] {
        ["verdict": .string("rejected"), "reason": .string(rejection.reason.rawValue), "retryable": .bool(rejection.isRetryable),
         "detail": .string(rejection.detail)]
    }
}

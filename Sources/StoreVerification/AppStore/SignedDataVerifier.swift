import PurchaseDomain
import Crypto
import Foundation
import JSON

/// Verifies App Store signed data (JWS): StoreKit 2 transactions, renewal info, App Store Server
/// Notifications V2 and AppTransactions, the way Apple's server libraries do.
///
/// Signature: compact JWS, `alg` ES256 only, raw r‖s signature, `x5c` of exactly leaf, intermediate
/// and root; the chain must lead to one of the configured roots (in production Apple Root CA - G3) and
/// carry Apple's marker OIDs. Validity is checked at the payload's `signedDate` (AppTransaction:
/// `receiptCreationDate`) unless online checks are on, then at the current time. Then the content:
/// bundle id, environment and (for notifications and app transactions in production) the app's Apple id.
public final class SignedDataVerifier: Sendable {
    /// Marker extension of Apple's leaf certificates that sign App Store data (and app receipts).
    public static let leafOID = AppleSigningChain.leafOID
    /// Marker extension of Apple's WWDR intermediate certificates.
    public static let intermediateOID = AppleSigningChain.intermediateOID

    public struct Configuration: Sendable {
        public var trustedRoots: [Certificate]
        /// The apps whose data is accepted, each by its bundle id; in production each with its Apple id, checked on
        /// notifications and app transactions.
        public var apps: [AppStoreApp]
        public var environment: AppStoreEnvironment
        /// Check validity at the current time and ask OCSP responders (leaf and intermediate).
        public var onlineChecks: Bool
        public var ocspTimeout: Duration
        public var chainCacheCapacity: Int
        public var chainCacheTimeToLive: Duration
        /// The explicit permission to accept Xcode and LocalTesting data without a signature (see
        /// `AppStoreEnvironment.isLocallySigned`); required for those environments, refused for the others.
        public var allowsUnsignedTestData: Bool

        /// One app's data.
        public init(trustedRoots: [Certificate], bundleId: BundleID, environment: AppStoreEnvironment, appAppleId: Int64? = nil,
                    onlineChecks: Bool = false, ocspTimeout: Duration = .seconds(5),
                    chainCacheCapacity: Int = 32, chainCacheTimeToLive: Duration = .seconds(15 * 60), allowsUnsignedTestData: Bool = false) {
            self.init(trustedRoots: trustedRoots, apps: [AppStoreApp(bundleId: bundleId, appAppleId: appAppleId)], environment: environment,
                      onlineChecks: onlineChecks, ocspTimeout: ocspTimeout, chainCacheCapacity: chainCacheCapacity,
                      chainCacheTimeToLive: chainCacheTimeToLive, allowsUnsignedTestData: allowsUnsignedTestData)
        }

        /// The data of each of several apps.
        public init(trustedRoots: [Certificate], apps: [AppStoreApp], environment: AppStoreEnvironment,
                    onlineChecks: Bool = false, ocspTimeout: Duration = .seconds(5),
                    chainCacheCapacity: Int = 32, chainCacheTimeToLive: Duration = .seconds(15 * 60), allowsUnsignedTestData: Bool = false) {
            self.trustedRoots = trustedRoots
            self.apps = apps
            self.environment = environment
            self.onlineChecks = onlineChecks
            self.ocspTimeout = ocspTimeout
            self.chainCacheCapacity = chainCacheCapacity
            self.chainCacheTimeToLive = chainCacheTimeToLive
            self.allowsUnsignedTestData = allowsUnsignedTestData
        }
    }

    public let configuration: Configuration
    /// Each accepted app's Apple id (nil where none is configured), by bundle id.
    private let appAppleIds: [BundleID: Int64?]
    private let chain: AppleSigningChain
    /// Xcode and LocalTesting data with the explicit permission: their local signature says nothing.
    private let skipsSignature: Bool
    private let cache: ChainCache
    private let revocation: RevocationChecker?
    private let now: @Sendable () -> Date

    /// - Parameter now: the clock (injectable for tests and for re-verifying old data).
    /// - Throws: `VerifierConfigurationError` when production is configured without `appAppleId`, when signed data
    ///   is checked without roots, or when unsigned test data is allowed where it must not be, or not allowed where
    ///   nothing else could be verified.
    public init(configuration: Configuration, now: @escaping @Sendable () -> Date = Date.init) throws {
        guard !configuration.apps.isEmpty else { throw VerifierConfigurationError("at least one app (bundle id) is required") }
        if configuration.environment == .production, let app = configuration.apps.first(where: { $0.appAppleId == nil }) {
            throw VerifierConfigurationError("appAppleId is required for the Production environment (app \(app.bundleId))")
        }
        var appAppleIds: [BundleID: Int64?] = [:]
        for app in configuration.apps {
            guard appAppleIds.updateValue(app.appAppleId, forKey: app.bundleId) == nil else {
                throw VerifierConfigurationError("the bundle id \(app.bundleId) is configured twice")
            }
        }
        self.appAppleIds = appAppleIds
        skipsSignature = try configuration.environment.acceptsUnsignedData(allowed: configuration.allowsUnsignedTestData)
        if configuration.trustedRoots.isEmpty && !skipsSignature {
            throw VerifierConfigurationError("at least one trusted root certificate is required")
        }
        self.configuration = configuration
        self.chain = try AppleSigningChain(trustedRoots: configuration.trustedRoots)
        self.cache = ChainCache(capacity: configuration.chainCacheCapacity,
                                timeToLive: TimeInterval(configuration.chainCacheTimeToLive.components.seconds))
        self.revocation = configuration.onlineChecks ? RevocationChecker(timeout: configuration.ocspTimeout) : nil
        self.now = now
    }

    /// Verifies a signed transaction (`Transaction.jwsRepresentation`, or `signedTransactionInfo`).
    public func verifyTransaction(_ jws: String) -> Result<AppStoreTransaction, Rejection> {
        verifyTransaction(utf8: Array(jws.utf8))
    }

    /// The same, from the JWS's bytes (`iapctl verify --lines` reads bytes; a String would be checked and copied again).
    public func verifyTransaction(utf8 jws: [UInt8]) -> Result<AppStoreTransaction, Rejection> {
        verify(jws, dateField: "signedDate").flatMap { fields in
            guard let transaction = AppStoreTransaction(fields) else {
                return .failure(Rejection(.malformedPayload, "transactionId, bundleId or productId missing"))
            }
            if let unfit = Rejection.unfitId(["transactionId": (transaction.transactionId.rawValue, IdentifierLimits.transaction),
                                              "originalTransactionId": (transaction.originalTransactionId?.rawValue, IdentifierLimits.transaction),
                                              "productId": (transaction.productId.rawValue, IdentifierLimits.product),
                                              // StoreKit's is a UUID; it is recorded and compared as the purchase's account.
                                              "appAccountToken": (transaction.appAccountToken?.rawValue, IdentifierLimits.accountToken)],
                                             of: "signed transaction") {
                return .failure(unfit)
            }
            guard CurrencyAmounts.quantities.contains(transaction.quantity) else {
                return .failure(Rejection(.malformedPayload, "the signed transaction's quantity \(transaction.quantity) is not within \(CurrencyAmounts.quantities): no event can carry it"))
            }
            return checkBundleAndEnvironment(transaction.bundleId, transaction.environment).map { transaction }
        }
    }

    /// Verifies signed renewal info (`signedRenewalInfo`).
    public func verifyRenewalInfo(_ jws: String) -> Result<AppStoreRenewalInfo, Rejection> {
        verify(jws, dateField: "signedDate").flatMap { fields in
            guard let info = AppStoreRenewalInfo(fields) else { return .failure(Rejection(.malformedPayload, "originalTransactionId missing")) }
            if let unfit = Rejection.unfitId(["originalTransactionId": (info.originalTransactionId.rawValue, IdentifierLimits.transaction),
                                              "productId": (info.productId?.rawValue, IdentifierLimits.product),
                                              "autoRenewProductId": (info.autoRenewProductId, IdentifierLimits.product),
                                              "offerIdentifier": (info.offerIdentifier, IdentifierLimits.offer)], of: "signed renewal info") {
                return .failure(unfit)
            }
            return checkEnvironment(info.environment).map { info }
        }
    }

    /// Verifies an AppTransaction.
    public func verifyAppTransaction(_ jws: String) -> Result<AppStoreAppTransaction, Rejection> {
        verify(jws, dateField: "receiptCreationDate").flatMap { fields in
            guard let app = AppStoreAppTransaction(fields) else { return .failure(Rejection(.malformedPayload, "bundleId missing")) }
            return checkBundleAndEnvironment(app.bundleId, app.environment)
                .flatMap { checkAppAppleId(app.appAppleId, of: app.bundleId, environment: app.environment) }
                .map { app }
        }
    }

    /// Verifies a notification's `signedPayload`, and the signed transaction and renewal info inside it.
    public func verifyNotification(_ signedPayload: String) -> Result<AppStoreNotification, Rejection> {
        verify(signedPayload, dateField: "signedDate").flatMap { fields in
            let json = JSONFields(object: fields)
            guard let type = json.string("notificationType"), let uuid = json.string("notificationUUID") else {
                return .failure(Rejection(.malformedPayload, "notificationType or notificationUUID missing"))
            }
            // Its id keys what was seen and answered, and the events it leads to carry it.
            if let unfit = Rejection.unfitId(["notificationUUID": (uuid, IdentifierLimits.notification), "notificationType": (type, IdentifierLimits.notification),
                                              "subtype": (json.string("subtype"), IdentifierLimits.notification)], of: "notification") {
                return .failure(unfit)
            }
            // The app's identity is in `data` (or `summary`, `appData`, `externalPurchaseToken` for other kinds).
            let data: JSONFields?, environment: AppStoreEnvironment?
            if let found = json.object("data") ?? json.object("summary") ?? json.object("appData") {
                (data, environment) = (found, found.string("environment").map(AppStoreEnvironment.init(rawValue:)))
            } else if let token = json.object("externalPurchaseToken") {
                // An external purchase token names no environment: a sandbox token's id starts with "SANDBOX".
                (data, environment) = (token, token.string("externalPurchaseId")?.hasPrefix("SANDBOX") == true ? .sandbox : .production)
            } else {
                (data, environment) = (nil, nil)
            }
            var notification = AppStoreNotification(
                notificationType: AppStoreNotificationType(rawValue: type), subtype: json.string("subtype"),
                notificationUUID: uuid, version: json.string("version"), signedDate: json.date("signedDate"),
                bundleId: data?.identifier("bundleId"), appAppleId: data?.int("appAppleId"),
                environment: environment, raw: fields)
            let identity = checkBundleAndEnvironment(notification.bundleId ?? "", notification.environment)
                .flatMap { checkAppAppleId(notification.appAppleId, of: notification.bundleId ?? "", environment: notification.environment) }
            if case .failure(let rejection) = identity { return .failure(rejection) }
            if let signed = data?.string("signedTransactionInfo") {
                switch verifyTransaction(signed) {
                case .success(let transaction): notification.transaction = transaction
                case .failure(let rejection): return .failure(rejection)
                }
            }
            if let signed = data?.string("signedRenewalInfo") {
                switch verifyRenewalInfo(signed) {
                case .success(let info): notification.renewalInfo = info
                case .failure(let rejection): return .failure(rejection)
                }
            }
            if let signed = data?.string("signedAppTransactionInfo") {
                switch verifyAppTransaction(signed) {
                case .success(let app): notification.appTransaction = app
                case .failure(let rejection): return .failure(rejection)
                }
            }
            return .success(notification)
        }
    }

    // MARK: - The signature

    private func verify(_ jws: String, dateField: String) -> Result<[String: JSONValue], Rejection> {
        verify(Array(jws.utf8), dateField: dateField)
    }

    private func verify(_ jws: [UInt8], dateField: String) -> Result<[String: JSONValue], Rejection> {
        let parsed: CompactJWS
        switch CompactJWS.parse(jws) {
        case .success(let value): parsed = value
        case .failure(let rejection): return .failure(rejection)
        }
        // Xcode and LocalTesting data are signed locally, never by the App Store: their signature says nothing.
        // Only a verifier configured for such an environment, with the explicit permission, skips it.
        if skipsSignature {
            return parsed.header().map { _ in parsed.payload }
        }
        let currentTime = now()
        let effectiveDate = configuration.onlineChecks ? currentTime : (JSONFields(object: parsed.payload).date(dateField) ?? currentTime)

        // The same header bytes as a chain verified before: same alg, same x5c, nothing to decode again.
        if let cached = cache.key(for: parsed.bytes[parsed.headerSegment], validAt: effectiveDate, now: currentTime) {
            return checkSignature(parsed, with: cached)
        }
        let header: [String: JSONValue]
        switch parsed.header() {
        case .success(let value): header = value
        case .failure(let rejection): return .failure(rejection)
        }
        guard header["alg"]?.stringValue == "ES256" else {
            return .failure(Rejection(.unsupportedAlgorithm, "alg \(header["alg"]?.stringValue ?? "missing"), only ES256 is accepted"))
        }
        guard let x5c = header["x5c"]?.arrayValue else { return .failure(Rejection(.missingX5C, "header has no x5c array")) }
        guard x5c.count == 3 else { return .failure(Rejection(.invalidChainLength, "x5c holds \(x5c.count) certificates, expected 3")) }
        var certificates: [Certificate] = []
        for (index, entry) in x5c.enumerated() {
            guard let base64 = entry.stringValue, let der = Data(base64Encoded: base64), let certificate = try? Certificate(der: der) else {
                return .failure(Rejection(.untrustedChain, "x5c[\(index)] is not a base64 DER certificate"))
            }
            certificates.append(certificate)
        }
        guard let leafKey = try? certificates[0].publicKey(), leafKey.isP256 else {
            return .failure(Rejection(.badSignature, "leaf key is not EC P-256"))
        }
        // The signature before the chain: a header changed in any byte (a genuine chain under another field) would
        // otherwise cost a chain verification, OCSP requests with online checks, and a cache entry, signed by nobody.
        if case .failure(let rejection) = checkSignature(parsed, with: leafKey) { return .failure(rejection) }
        switch verifyChain(leaf: certificates[0], intermediate: certificates[1], at: effectiveDate) {
        case .success(let validity):
            cache.insert(parsed.bytes[parsed.headerSegment], leafKey: leafKey, validFrom: validity.lowerBound, validUntil: validity.upperBound,
                         now: currentTime)
            return .success(parsed.payload)
        case .failure(let rejection):
            return .failure(rejection)
        }
    }

    private func checkSignature(_ parsed: CompactJWS, with leafKey: PublicKey) -> Result<[String: JSONValue], Rejection> {
        guard parsed.signature.count == 64 else {
            return .failure(Rejection(.badSignature, "signature is \(parsed.signature.count) bytes, expected 64-byte r‖s"))
        }
        guard leafKey.verifyES256(message: parsed.bytes[parsed.signingInput], rawSignature: parsed.signature) else {
            return .failure(Rejection(.badSignature, "ES256 signature does not verify with the leaf certificate's key"))
        }
        return .success(parsed.payload)
    }

    /// The chain from `leaf` through `intermediate` to a configured root at `date` (and unrevoked, with online checks):
    /// the window in which both certificates are valid.
    private func verifyChain(leaf: Certificate, intermediate: Certificate, at date: Date) -> Result<ClosedRange<Date>, Rejection> {
        // x5c[2] is not offered: only a configured root may end the chain.
        if case .failure(let rejection) = chain.verify(leaf: leaf, intermediates: [intermediate], at: date) { return .failure(rejection) }
        if let revocation {
            if case .failure(let rejection) = revocation.check(leaf: leaf, intermediate: intermediate, roots: configuration.trustedRoots) {
                return .failure(rejection)
            }
        }
        let validFrom = [leaf, intermediate].compactMap(\.notBefore).max() ?? date
        let validUntil = [leaf, intermediate].compactMap(\.notAfter).min() ?? date
        return .success(validFrom...max(validFrom, validUntil))
    }

    // MARK: - The content

    private func checkBundleAndEnvironment(_ bundleId: BundleID, _ environment: AppStoreEnvironment?) -> Result<Void, Rejection> {
        guard appAppleIds[bundleId] != nil else {
            return .failure(Rejection(.wrongBundleId, "signed for '\(bundleId)', expected \(AppStoreApp.expected(configuration.apps))"))
        }
        return checkEnvironment(environment)
    }

    private func checkEnvironment(_ environment: AppStoreEnvironment?) -> Result<Void, Rejection> {
        guard environment == configuration.environment else {
            return .failure(Rejection(.wrongEnvironment, "signed for '\(environment?.rawValue ?? "none")', expected '\(configuration.environment)'"))
        }
        return .success(())
    }

    /// The Apple id `bundleId`'s data names, against the app's (whose bundle id was checked first).
    private func checkAppAppleId(_ appAppleId: Int64?, of bundleId: BundleID, environment: AppStoreEnvironment?) -> Result<Void, Rejection> {
        let expected = appAppleIds[bundleId] ?? nil
        guard environment == .production || expected != nil && appAppleId != nil else { return .success(()) }
        guard appAppleId == expected else {
            return .failure(Rejection(.wrongAppAppleId, "signed for app \(appAppleId.map(String.init) ?? "none"), expected \(expected.map(String.init) ?? "none")"))
        }
        return .success(())
    }
}

import PurchaseDomain
import Crypto
import Foundation

/// Verifies StoreKit 1 app receipts as strictly as `SignedDataVerifier` verifies signed data.
///
/// The container: one DER PKCS#7 SignedData with the payload embedded and nothing after it, one signature. The
/// chain: the signer → an embedded intermediate → one of the configured receipt roots (Apple's receipts chain to
/// "Apple Inc. Root", not to the Apple Root CA - G3 of signed data), exactly three certificates, with Apple's
/// marker OIDs on leaf and intermediate, valid at the receipt's creation date (with online checks: now). Then the
/// content: bundle id, and the receipt type (field 0) must name the configured environment. A receipt without a
/// type is rejected in every environment: nothing then says where it was issued.
///
/// Without receipt roots every receipt is rejected (`storeRejected`), so that a deployment accepts receipts only
/// when it chose to. Xcode receipts are signed by Xcode, not the App Store: a verifier configured for Xcode with
/// `allowsUnsignedTestData` decodes them without the signature, as Apple's ReceiptUtility does.
public final class ReceiptVerifier: Sendable {
    public struct Configuration: Sendable {
        /// The roots receipts must chain to; none: receipts are not accepted.
        public var trustedRoots: [Certificate]
        /// The bundle ids of the apps whose receipts are accepted.
        public var bundleIds: [BundleID]
        public var environment: AppStoreEnvironment
        /// Check validity at the current time instead of the receipt's creation date.
        public var onlineChecks: Bool
        /// The explicit permission to accept Xcode receipts without a signature; required for the Xcode and
        /// LocalTesting environments, refused for the others.
        public var allowsUnsignedTestData: Bool

        public init(trustedRoots: [Certificate], bundleId: BundleID, environment: AppStoreEnvironment, onlineChecks: Bool = false,
                    allowsUnsignedTestData: Bool = false) {
            self.init(trustedRoots: trustedRoots, bundleIds: [bundleId], environment: environment, onlineChecks: onlineChecks,
                      allowsUnsignedTestData: allowsUnsignedTestData)
        }

        public init(trustedRoots: [Certificate], bundleIds: [BundleID], environment: AppStoreEnvironment, onlineChecks: Bool = false,
                    allowsUnsignedTestData: Bool = false) {
            self.trustedRoots = trustedRoots
            self.bundleIds = bundleIds
            self.environment = environment
            self.onlineChecks = onlineChecks
            self.allowsUnsignedTestData = allowsUnsignedTestData
        }
    }

    public let configuration: Configuration
    private let chain: AppleSigningChain
    private let skipsSignature: Bool
    private let now: @Sendable () -> Date

    /// The largest base64 receipt accepted.
    public static let maxBase64Length = 12 * 1024 * 1024

    /// - Throws: `VerifierConfigurationError` when unsigned test data is allowed where it must not be, or not
    ///   allowed for Xcode or LocalTesting.
    public init(configuration: Configuration, now: @escaping @Sendable () -> Date = Date.init) throws {
        skipsSignature = try configuration.environment.acceptsUnsignedData(allowed: configuration.allowsUnsignedTestData)
        chain = try AppleSigningChain(trustedRoots: configuration.trustedRoots)
        self.configuration = configuration
        self.now = now
    }

    /// Verifies a base64 receipt (as `Bundle.main.appStoreReceiptURL` holds it).
    public func verify(base64 receipt: String) -> Result<AppReceipt, Rejection> {
        guard skipsSignature || !configuration.trustedRoots.isEmpty else {
            return .failure(Rejection(.storeRejected, "app receipts are not configured (no receipt root certificates)"))
        }
        guard receipt.utf8.count <= Self.maxBase64Length else { return .failure(Rejection(.malformedReceipt, "receipt too large")) }
        guard let der = Data(base64Encoded: receipt, options: .ignoreUnknownCharacters), !der.isEmpty else {
            return .failure(Rejection(.malformedReceipt, "not base64"))
        }
        let container: PKCS7SignedData
        do {
            container = try PKCS7SignedData(der: der)
        } catch {
            return .failure(Rejection(.malformedReceipt, "\(error)"))
        }
        let unverified = container.content
        let receipt: AppReceipt
        do {
            receipt = try AppReceiptParser.parse(unverified)
        } catch {
            return .failure(Rejection(.malformedReceipt, "payload: \(error)"))
        }
        // The time the receipt is judged at, as its certificates are: now with online checks, else when it was made (a
        // receipt submitted in time is not refused because a backlog delayed its verification).
        let time = configuration.onlineChecks ? now() : (receipt.creationDate ?? now())
        if !skipsSignature {
            if case .failure(let rejection) = verifySignature(container, unverified, at: time) { return .failure(rejection) }
        }
        guard let bundleId = receipt.bundleId, configuration.bundleIds.contains(bundleId) else {
            let expected = AppStoreApp.expected(configuration.bundleIds.map { AppStoreApp(bundleId: $0) })
            return .failure(Rejection(.wrongBundleId, "receipt for '\(receipt.bundleId ?? "none")', expected \(expected)"))
        }
        guard let environment = receipt.environment, environment == configuration.environment else {
            return .failure(Rejection(.wrongEnvironment, "receipt type '\(receipt.receiptType ?? "none")', expected \(configuration.environment)"))
        }
        // A receipt with an expiration date (an app bought through the Volume Purchase Program) expires then; one without
        // does not.
        if let expiration = receipt.expirationDate, expiration <= time {
            return .failure(Rejection(.receiptExpired, "the receipt expired at \(expiration)"))
        }
        return .success(receipt)
    }

    /// The signer's chain in Apple's shape, then the signature over exactly the content that was parsed.
    private func verifySignature(_ container: PKCS7SignedData, _ unverified: Data, at time: Date) -> Result<Void, Rejection> {
        let signers = container.signers
        guard container.signerCount == 1, signers.count == 1, let leaf = signers.first else {
            return .failure(Rejection(.receiptSignatureInvalid, "\(container.signerCount) signatures with \(signers.count) embedded signers, expected 1"))
        }
        let leafDER = leaf.derRepresentation
        let intermediates = container.certificates.filter { $0.derRepresentation != leafDER }
        if case .failure(let rejection) = chain.verify(leaf: leaf, intermediates: intermediates, at: time) { return .failure(rejection) }
        switch container.verifySignature(signer: leaf) {
        case .success(let signedContent):
            // What was parsed must be exactly what was signed.
            guard signedContent == unverified else { return .failure(Rejection(.receiptSignatureInvalid, "signed content differs")) }
            return .success(())
        case .failure(let error):
            return .failure(Rejection(.receiptSignatureInvalid, "\(error)"))
        }
    }
}

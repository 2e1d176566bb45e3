import Crypto
import Foundation

/// Verifies StoreKit 1 app receipts: the PKCS#7 signature and its chain against the configured roots,
/// then decodes the payload. Xcode-environment receipts are decoded without verification, as Apple's
/// ReceiptUtility does (they are signed by Xcode, not the App Store).
public final class ReceiptVerifier: Sendable {
    public struct Configuration: Sendable {
        public var trustedRoots: [Certificate]
        public var bundleId: String
        public var environment: AppStoreEnvironment
        /// Check validity at the current time instead of the receipt's creation date.
        public var onlineChecks: Bool

        public init(trustedRoots: [Certificate], bundleId: String, environment: AppStoreEnvironment, onlineChecks: Bool = false) {
            self.trustedRoots = trustedRoots
            self.bundleId = bundleId
            self.environment = environment
            self.onlineChecks = onlineChecks
        }
    }

    public let configuration: Configuration
    private let now: @Sendable () -> Date

    /// The largest base64 receipt accepted.
    public static let maxBase64Length = 12 * 1024 * 1024

    public init(configuration: Configuration, now: @escaping @Sendable () -> Date = Date.init) throws {
        if configuration.trustedRoots.isEmpty && !configuration.environment.isLocallySigned {
            throw VerifierConfigurationError("at least one trusted root certificate is required")
        }
        self.configuration = configuration
        self.now = now
    }

    /// Verifies a base64 receipt (as `Bundle.main.appStoreReceiptURL` holds it).
    public func verify(base64 receipt: String) -> Result<AppReceipt, Rejection> {
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
        if !configuration.environment.isLocallySigned {
            let time = configuration.onlineChecks ? now() : (receipt.creationDate ?? now())
            switch container.verify(trustedRoots: configuration.trustedRoots, at: time) {
            case .success(let signedContent):
                // What was parsed must be exactly what was signed.
                guard signedContent == unverified else { return .failure(Rejection(.receiptSignatureInvalid, "signed content differs")) }
            case .failure(.expired(let why)): return .failure(Rejection(.certificateExpired, why))
            case .failure(.untrusted(let why)): return .failure(Rejection(.untrustedChain, why))
            case .failure(.badSignature(let why)): return .failure(Rejection(.receiptSignatureInvalid, why))
            }
        }
        guard receipt.bundleId == configuration.bundleId else {
            return .failure(Rejection(.wrongBundleId, "receipt for '\(receipt.bundleId ?? "none")', expected '\(configuration.bundleId)'"))
        }
        return .success(receipt)
    }
}

import Crypto
import Foundation
import StoreVerification

/// A certificate authority of our own in Apple's shape: root → intermediate (with Apple's intermediate
/// marker OID) → leaf (with the leaf marker OID), all P-256. The same shape serves signed data and app
/// receipts (Apple's receipt-signing leaf carries the same marker OID). Built at run time for tests and demos;
/// no key or certificate is ever copied from elsewhere.
public struct TestPKI: Sendable {
    public let root: Certificate
    public let rootKey: PrivateKey
    /// The leaf's issuer (the root itself when `Options.intermediateCount` is 0).
    public let intermediate: Certificate
    public let intermediateKey: PrivateKey
    /// Every CA between leaf and root, the leaf's issuer first: `[intermediate]` in Apple's shape.
    public let intermediates: [Certificate]
    public let leaf: Certificate
    public let leafKey: PrivateKey

    /// - Parameter intermediates: every CA between leaf and root, the leaf's issuer first; `[intermediate]` when nil.
    public init(root: Certificate, rootKey: PrivateKey, intermediate: Certificate, intermediateKey: PrivateKey,
                leaf: Certificate, leafKey: PrivateKey, intermediates: [Certificate]? = nil) {
        self.root = root
        self.rootKey = rootKey
        self.intermediate = intermediate
        self.intermediateKey = intermediateKey
        self.intermediates = intermediates ?? [intermediate]
        self.leaf = leaf
        self.leafKey = leafKey
    }

    /// What to get wrong on purpose, for tests of each rejection.
    public struct Options: Sendable {
        public var validFrom: Date
        public var validUntil: Date
        public var leafValidUntil: Date?
        public var leafOID: Bool
        public var intermediateOID: Bool
        /// OCSP responder URL written into the leaf and intermediate.
        public var ocspURL: String?
        /// CAs between leaf and root: 1 in Apple's shape; 0 (the root issues the leaf) or 2 and more make chains of the
        /// wrong length. Each carries the intermediate marker OID when `intermediateOID`.
        public var intermediateCount: Int

        public init(validFrom: Date = Date().addingTimeInterval(-365 * 86_400), validUntil: Date = Date().addingTimeInterval(365 * 86_400),
                    leafValidUntil: Date? = nil, leafOID: Bool = true, intermediateOID: Bool = true, ocspURL: String? = nil,
                    intermediateCount: Int = 1) {
            self.validFrom = validFrom
            self.validUntil = validUntil
            self.leafValidUntil = leafValidUntil
            self.leafOID = leafOID
            self.intermediateOID = intermediateOID
            self.ocspURL = ocspURL
            self.intermediateCount = intermediateCount
        }
    }

    public static func make(_ options: Options = Options(), name: String = "iap-pipeline test") throws -> TestPKI {
        let rootKey = try PrivateKey.generateP256()
        let root = try CertificateIssuer.issue(
            .init(commonName: "\(name) Root CA", isCA: true, notBefore: options.validFrom, notAfter: options.validUntil),
            subjectKey: rootKey, issuer: nil)
        // Issued from the root down; the last one issues the leaf.
        var issuer = (certificate: root, key: rootKey)
        var intermediates: [Certificate] = []
        for level in 0..<options.intermediateCount {
            let key = try PrivateKey.generateP256()
            let certificate = try CertificateIssuer.issue(
                .init(commonName: "\(name) Intermediate CA\(level == 0 ? "" : " \(level + 1)")", isCA: true, notBefore: options.validFrom,
                      notAfter: options.validUntil, markerExtensionOIDs: options.intermediateOID ? [SignedDataVerifier.intermediateOID] : [],
                      ocspURL: options.ocspURL),
                subjectKey: key, issuer: issuer)
            intermediates.insert(certificate, at: 0)
            issuer = (certificate, key)
        }
        let (intermediate, intermediateKey) = issuer
        let leafKey = try PrivateKey.generateP256()
        let leaf = try CertificateIssuer.issue(
            .init(commonName: "\(name) Signing", isCA: false, notBefore: options.validFrom, notAfter: options.leafValidUntil ?? options.validUntil,
                  markerExtensionOIDs: options.leafOID ? [SignedDataVerifier.leafOID] : [], ocspURL: options.ocspURL),
            subjectKey: leafKey, issuer: (intermediate, intermediateKey))
        return TestPKI(root: root, rootKey: rootKey, intermediate: intermediate, intermediateKey: intermediateKey, leaf: leaf, leafKey: leafKey,
                       intermediates: intermediates)
    }

    /// The whole chain, leaf first: leaf, intermediate, root in Apple's shape.
    public var chain: [Certificate] { [leaf] + intermediates + [root] }

    /// The certificates as a JWS `x5c` header holds them (base64 DER, leaf first).
    public var x5c: [String] { chain.map { $0.derRepresentation.base64EncodedString() } }
}

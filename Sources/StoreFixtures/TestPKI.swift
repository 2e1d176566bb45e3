import Crypto
import Foundation
import StoreVerification

/// A certificate authority of our own in Apple's shape: root → intermediate (with Apple's intermediate
/// marker OID) → leaf (with the leaf marker OID), all P-256. Built at run time for tests and demos;
/// no key or certificate is ever copied from elsewhere.
public struct TestPKI: Sendable {
    public let root: Certificate
    public let rootKey: PrivateKey
    public let intermediate: Certificate
    public let intermediateKey: PrivateKey
    public let leaf: Certificate
    public let leafKey: PrivateKey

    public init(root: Certificate, rootKey: PrivateKey, intermediate: Certificate, intermediateKey: PrivateKey,
                leaf: Certificate, leafKey: PrivateKey) {
        self.root = root
        self.rootKey = rootKey
        self.intermediate = intermediate
        self.intermediateKey = intermediateKey
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

        public init(validFrom: Date = Date().addingTimeInterval(-365 * 86_400), validUntil: Date = Date().addingTimeInterval(365 * 86_400),
                    leafValidUntil: Date? = nil, leafOID: Bool = true, intermediateOID: Bool = true, ocspURL: String? = nil) {
            self.validFrom = validFrom
            self.validUntil = validUntil
            self.leafValidUntil = leafValidUntil
            self.leafOID = leafOID
            self.intermediateOID = intermediateOID
            self.ocspURL = ocspURL
        }
    }

    public static func make(_ options: Options = Options(), name: String = "iap-pipeline test") throws -> TestPKI {
        let rootKey = try PrivateKey.generateP256()
        let root = try CertificateIssuer.issue(
            .init(commonName: "\(name) Root CA", isCA: true, notBefore: options.validFrom, notAfter: options.validUntil),
            subjectKey: rootKey, issuer: nil)
        let intermediateKey = try PrivateKey.generateP256()
        let intermediate = try CertificateIssuer.issue(
            .init(commonName: "\(name) Intermediate CA", isCA: true, notBefore: options.validFrom, notAfter: options.validUntil,
                  markerExtensionOIDs: options.intermediateOID ? [SignedDataVerifier.intermediateOID] : [], ocspURL: options.ocspURL),
            subjectKey: intermediateKey, issuer: (root, rootKey))
        let leafKey = try PrivateKey.generateP256()
        let leaf = try CertificateIssuer.issue(
            .init(commonName: "\(name) Signing", isCA: false, notBefore: options.validFrom, notAfter: options.leafValidUntil ?? options.validUntil,
                  markerExtensionOIDs: options.leafOID ? [SignedDataVerifier.leafOID] : [], ocspURL: options.ocspURL),
            subjectKey: leafKey, issuer: (intermediate, intermediateKey))
        return TestPKI(root: root, rootKey: rootKey, intermediate: intermediate, intermediateKey: intermediateKey, leaf: leaf, leafKey: leafKey)
    }

    /// The three certificates as a JWS `x5c` header holds them (base64 DER, leaf first).
    public var x5c: [String] { [leaf, intermediate, root].map { $0.derRepresentation.base64EncodedString() } }
}

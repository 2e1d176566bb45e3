import Crypto
import Foundation

/// The shape of the certificate chains Apple signs with, for App Store signed data (JWS) and StoreKit 1 app
/// receipts alike: exactly leaf → intermediate → trusted root, the leaf carrying Apple's signing marker
/// extension and the intermediate the WWDR marker extension.
struct AppleSigningChain: Sendable {
    /// Marker extension of Apple's leaf certificates that sign App Store data and app receipts.
    static let leafOID = "1.2.840.113635.100.6.11.1"
    /// Marker extension of Apple's WWDR intermediate certificates.
    static let intermediateOID = "1.2.840.113635.100.6.2.1"

    private let verifier: ChainVerifier

    init(trustedRoots: [Certificate]) throws {
        verifier = try ChainVerifier(trustedRoots: trustedRoots)
    }

    /// Verifies `leaf` through `intermediates` (candidates; OpenSSL picks the ones that chain) at `date`, and
    /// returns the chain: leaf, intermediate, root.
    func verify(leaf: Certificate, intermediates: [Certificate], at date: Date) -> Result<[Certificate], Rejection> {
        guard leaf.hasExtension(oid: Self.leafOID) else { return .failure(Rejection(.missingAppleOID, "leaf lacks \(Self.leafOID)")) }
        let chain: [Certificate]
        switch verifier.verify(leaf: leaf, intermediates: intermediates, at: date) {
        case .success(let built): chain = built
        case .failure(.expired(let reason)): return .failure(Rejection(.certificateExpired, "\(reason) at \(date)"))
        case .failure(.untrusted(let reason)): return .failure(Rejection(.untrustedChain, reason))
        }
        // The chain OpenSSL built, not the one the sender listed: a root that issued the leaf itself, or an extra CA
        // between intermediate and root, is not Apple's shape even when every signature holds.
        guard chain.count == 3 else {
            return .failure(Rejection(.invalidChainLength, "the chain to a trusted root has \(chain.count) certificates, expected 3"))
        }
        guard chain[1].hasExtension(oid: Self.intermediateOID) else {
            return .failure(Rejection(.missingAppleOID, "intermediate lacks \(Self.intermediateOID)"))
        }
        return .success(chain)
    }
}

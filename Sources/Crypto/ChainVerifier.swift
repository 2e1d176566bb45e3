import COpenSSL
import Foundation

/// Verifies certificate chains against a fixed set of trusted roots with OpenSSL's X509 store.
///
/// `@unchecked Sendable`: the `X509_STORE` is filled in `init` and only read afterwards; each
/// verification uses its own `X509_STORE_CTX`, which is how OpenSSL supports concurrent use.
public final class ChainVerifier: @unchecked Sendable {
    /// Why a chain was not accepted.
    public enum Failure: Error, Sendable, Equatable {
        /// A certificate was expired (or not yet valid) at the verification time.
        case expired(String)
        /// The chain does not lead to a trusted root, or a certificate in it is invalid.
        case untrusted(String)
    }

    private let store: OpaquePointer
    public let roots: [Certificate]

    public init(trustedRoots: [Certificate]) throws {
        guard let store = X509_STORE_new() else { throw CryptoError.openSSL("X509_STORE_new") }
        for root in trustedRoots where X509_STORE_add_cert(store, root.pointer) != 1 {
            X509_STORE_free(store)
            throw CryptoError.openSSL("cannot add trusted root \(root.subject)")
        }
        self.store = store
        self.roots = trustedRoots
    }

    deinit { X509_STORE_free(store) }

    /// Verifies `leaf` through `intermediates` to a trusted root, at `time` (the current time when `nil`), and
    /// returns the chain OpenSSL built: leaf first, the trusted root last.
    public func verify(leaf: Certificate, intermediates: [Certificate], at time: Date?) -> Result<[Certificate], Failure> {
        guard let context = X509_STORE_CTX_new() else { return .failure(.untrusted("X509_STORE_CTX_new failed")) }
        defer { X509_STORE_CTX_free(context) }
        guard let untrusted = OPENSSL_sk_new_null() else { return .failure(.untrusted("OPENSSL_sk_new_null failed")) }
        defer { OPENSSL_sk_free(untrusted) } // The stack borrows the certificates; it does not own them.
        for certificate in intermediates { OPENSSL_sk_push(untrusted, UnsafeRawPointer(certificate.pointer)) }
        return withExtendedLifetime((leaf, intermediates)) {
            guard X509_STORE_CTX_init(context, store, leaf.pointer, untrusted) == 1 else {
                return .failure(.untrusted("X509_STORE_CTX_init failed" + drainedOpenSSLErrors()))
            }
            if let time { X509_STORE_CTX_set_time(context, 0, time_t(time.timeIntervalSince1970)) }
            if X509_verify_cert(context) == 1 { return .success(X509_STORE_CTX_get0_chain(context).map(Certificate.retained(from:)) ?? []) }
            let code = X509_STORE_CTX_get_error(context)
            let reason = String(cString: X509_verify_cert_error_string(Int(code)))
            _ = drainedOpenSSLErrors()
            switch code {
            case X509_V_ERR_CERT_HAS_EXPIRED, X509_V_ERR_CERT_NOT_YET_VALID:
                return .failure(.expired(reason))
            default:
                return .failure(.untrusted(reason))
            }
        }
    }
}

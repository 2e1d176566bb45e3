import COpenSSL
import Foundation

/// OCSP (RFC 6960) requests and responses for one certificate, encoded and checked with OpenSSL.
/// Transport (HTTP POST to the responder) is the caller's.
public enum OCSP {
    /// What the responder said about the certificate.
    public enum Status: Sendable, Equatable {
        case good
        case revoked
        case unknown
        /// The response could not be used (malformed, unsigned by a trusted party, not about this certificate).
        case invalidResponse(String)
    }

    /// The responder URLs in the certificate's Authority Information Access extension.
    public static func responderURLs(of certificate: Certificate) -> [String] {
        guard let stack = X509_get1_ocsp(certificate.pointer) else { return [] }
        defer { X509_email_free(stack) }
        return (0..<OPENSSL_sk_num(stack)).compactMap { index in
            OPENSSL_sk_value(stack, index).map { String(cString: $0.assumingMemoryBound(to: CChar.self)) }
        }
    }

    /// A DER OCSP request for `certificate`, issued by `issuer`.
    public static func request(for certificate: Certificate, issuer: Certificate) throws -> Data {
        guard let request = OCSP_REQUEST_new() else { throw CryptoError.openSSL("OCSP_REQUEST_new") }
        defer { OCSP_REQUEST_free(request) }
        guard let id = OCSP_cert_to_id(EVP_sha1(), certificate.pointer, issuer.pointer) else { throw CryptoError.openSSL("OCSP_cert_to_id") }
        guard OCSP_request_add0_id(request, id) != nil else {
            OCSP_CERTID_free(id)
            throw CryptoError.openSSL("OCSP_request_add0_id")
        }
        var output: UnsafeMutablePointer<UInt8>?
        let length = i2d_OCSP_REQUEST(request, &output)
        guard length > 0, let output else { throw CryptoError.openSSL("i2d_OCSP_REQUEST") }
        defer { CRYPTO_free(output, #fileID, #line) }
        return Data(bytes: output, count: Int(length))
    }

    /// Checks a DER OCSP response about `certificate`: it must be signed by the issuer (or a responder
    /// certified by it) chaining to `roots`, and name the certificate.
    public static func status(of response: Data, for certificate: Certificate, issuer: Certificate, roots: [Certificate]) -> Status {
        let parsed: OpaquePointer? = withBytes(response) { base, count in
            var cursor: UnsafePointer<UInt8>? = base
            return d2i_OCSP_RESPONSE(nil, &cursor, count)
        }
        guard let parsed else { return .invalidResponse("not a DER OCSP response" + drainedOpenSSLErrors()) }
        defer { OCSP_RESPONSE_free(parsed) }
        let responseStatus = OCSP_response_status(parsed)
        guard responseStatus == OCSP_RESPONSE_STATUS_SUCCESSFUL else {
            return .invalidResponse("responder answered \(String(cString: OCSP_response_status_str(Int(responseStatus))))")
        }
        guard let basic = OCSP_response_get1_basic(parsed) else { return .invalidResponse("no basic response" + drainedOpenSSLErrors()) }
        defer { OCSP_BASICRESP_free(basic) }
        guard let store = X509_STORE_new(), let extra = OPENSSL_sk_new_null() else { return .invalidResponse("out of memory") }
        defer {
            X509_STORE_free(store)
            OPENSSL_sk_free(extra)
        }
        for root in roots { X509_STORE_add_cert(store, root.pointer) }
        OPENSSL_sk_push(extra, UnsafeRawPointer(issuer.pointer))
        let verified = withExtendedLifetime((roots, issuer)) { OCSP_basic_verify(basic, extra, store, 0) }
        guard verified == 1 else { return .invalidResponse("response signature or signer not trusted" + drainedOpenSSLErrors()) }
        guard let id = OCSP_cert_to_id(EVP_sha1(), certificate.pointer, issuer.pointer) else { return .invalidResponse("OCSP_cert_to_id") }
        defer { OCSP_CERTID_free(id) }
        var status: Int32 = -1
        var reason: Int32 = 0
        var revokedAt: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        var thisUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        var nextUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        guard OCSP_resp_find_status(basic, id, &status, &reason, &revokedAt, &thisUpdate, &nextUpdate) == 1 else {
            return .invalidResponse("response does not name the certificate")
        }
        guard OCSP_check_validity(thisUpdate, nextUpdate, 300, -1) == 1 else {
            _ = drainedOpenSSLErrors()
            return .invalidResponse("response is outdated")
        }
        switch status {
        case V_OCSP_CERTSTATUS_GOOD: return .good
        case V_OCSP_CERTSTATUS_REVOKED: return .revoked
        default: return .unknown
        }
    }

    /// A signed response (as a responder would send it) to `request`, saying `revoked` or good for every
    /// certificate asked about; signed by `signer`, the issuer of those certificates. For tests.
    public static func response(to request: Data, revoked: Bool, signer: Certificate, key: PrivateKey) throws -> Data {
        let parsed: OpaquePointer? = withBytes(request) { base, count in
            var cursor: UnsafePointer<UInt8>? = base
            return d2i_OCSP_REQUEST(nil, &cursor, count)
        }
        guard let parsed else { throw CryptoError.openSSL("not a DER OCSP request") }
        defer { OCSP_REQUEST_free(parsed) }
        guard let basic = OCSP_BASICRESP_new() else { throw CryptoError.openSSL("OCSP_BASICRESP_new") }
        defer { OCSP_BASICRESP_free(basic) }
        let now = time(nil)
        guard let thisUpdate = ASN1_TIME_set(nil, now - 60), let nextUpdate = ASN1_TIME_set(nil, now + 3600) else {
            throw CryptoError.openSSL("ASN1_TIME_set")
        }
        defer {
            ASN1_STRING_free(thisUpdate)
            ASN1_STRING_free(nextUpdate)
        }
        for index in 0..<OCSP_request_onereq_count(parsed) {
            let id = OCSP_onereq_get0_id(OCSP_request_onereq_get0(parsed, index))
            let status = revoked ? V_OCSP_CERTSTATUS_REVOKED : V_OCSP_CERTSTATUS_GOOD
            guard OCSP_basic_add1_status(basic, id, status, 0, revoked ? thisUpdate : nil, thisUpdate, nextUpdate) != nil else {
                throw CryptoError.openSSL("OCSP_basic_add1_status")
            }
        }
        let signed = withExtendedLifetime((signer, key)) { OCSP_basic_sign(basic, signer.pointer, key.pointer, EVP_sha256(), nil, 0) }
        guard signed == 1 else { throw CryptoError.openSSL("OCSP_basic_sign") }
        guard let response = OCSP_response_create(OCSP_RESPONSE_STATUS_SUCCESSFUL, basic) else { throw CryptoError.openSSL("OCSP_response_create") }
        defer { OCSP_RESPONSE_free(response) }
        var output: UnsafeMutablePointer<UInt8>?
        let length = i2d_OCSP_RESPONSE(response, &output)
        guard length > 0, let output else { throw CryptoError.openSSL("i2d_OCSP_RESPONSE") }
        defer { CRYPTO_free(output, #fileID, #line) }
        return Data(bytes: output, count: Int(length))
    }
}

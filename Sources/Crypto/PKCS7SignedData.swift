import COpenSSL
import Foundation

/// A PKCS#7 SignedData container (as in StoreKit 1 app receipts); owns its `PKCS7*`.
///
/// `@unchecked Sendable`: immutable after parsing; verification builds its own store and context.
public final class PKCS7SignedData: @unchecked Sendable {
    private let pointer: UnsafeMutablePointer<PKCS7>

    /// Parses DER; fails for anything that is not a SignedData with embedded content.
    public init(der: Data) throws {
        let parsed: UnsafeMutablePointer<PKCS7>? = withBytes(der) { base, count in
            var cursor: UnsafePointer<UInt8>? = base
            return d2i_PKCS7(nil, &cursor, count)
        }
        guard let parsed else { throw CryptoError.openSSL("not a DER PKCS#7 structure") }
        guard OBJ_obj2nid(parsed.pointee.type) == NID_pkcs7_signed,
              let signed = parsed.pointee.d.sign, let contents = signed.pointee.contents,
              OBJ_obj2nid(contents.pointee.type) == NID_pkcs7_data, contents.pointee.d.data != nil
        else {
            PKCS7_free(parsed)
            throw CryptoError("PKCS#7 structure is not SignedData with embedded data")
        }
        pointer = parsed
    }

    deinit { PKCS7_free(pointer) }

    /// The signed content, without any verification.
    public var content: Data {
        guard let data = pointer.pointee.d.sign?.pointee.contents?.pointee.d.data,
              let bytes = ASN1_STRING_get0_data(data) else { return Data() }
        return Data(bytes: bytes, count: Int(ASN1_STRING_length(data)))
    }

    /// Why a signature was not accepted.
    public enum Failure: Error, Sendable, Equatable {
        case expired(String)
        case untrusted(String)
        case badSignature(String)
    }

    /// Verifies the signature and the signer's chain (certificates embedded in the container, plus
    /// `roots`) at `time` (now when `nil`), and returns the content.
    public func verify(trustedRoots roots: [Certificate], at time: Date?) -> Result<Data, Failure> {
        // A store per call: the verification time lives in the store's parameters.
        guard let store = X509_STORE_new() else { return .failure(.untrusted("X509_STORE_new failed")) }
        defer { X509_STORE_free(store) }
        for root in roots { X509_STORE_add_cert(store, root.pointer) }
        if let time, let parameters = X509_STORE_get0_param(store) {
            X509_VERIFY_PARAM_set_time(parameters, time_t(time.timeIntervalSince1970))
        }
        guard let output = BIO_new(BIO_s_mem()) else { return .failure(.untrusted("BIO_new failed")) }
        defer { BIO_free(output) }
        let verified = withExtendedLifetime(roots) { PKCS7_verify(pointer, nil, store, nil, output, PKCS7_BINARY) }
        guard verified == 1 else {
            let packed = ERR_peek_last_error()
            let errors = drainedOpenSSLErrors()
            let reason = Int32(packed & 0x7FFFFF)
            if reason == PKCS7_R_CERTIFICATE_VERIFY_ERROR {
                return .failure(errors.contains("expired") || errors.contains("not yet valid") ? .expired(errors) : .untrusted(errors))
            }
            return .failure(.badSignature(errors))
        }
        var bytes: UnsafeMutablePointer<CChar>?
        let length = BIO_get_mem_data_shim(output, &bytes)
        guard length > 0, let bytes else { return .success(Data()) }
        return .success(Data(bytes: bytes, count: length))
    }

    /// Signs `content` as SignedData with the content embedded, including `chain` certificates.
    public static func sign(content: Data, signer: Certificate, key: PrivateKey, chain: [Certificate]) throws -> Data {
        guard let certificates = OPENSSL_sk_new_null() else { throw CryptoError.openSSL("OPENSSL_sk_new_null") }
        defer { OPENSSL_sk_free(certificates) }
        for certificate in chain { OPENSSL_sk_push(certificates, UnsafeRawPointer(certificate.pointer)) }
        let signed: UnsafeMutablePointer<PKCS7>? = withExtendedLifetime((signer, key, chain)) {
            withBytes(content) { base, count in
                guard let input = BIO_new_mem_buf(base, Int32(count)) else { return nil }
                defer { BIO_free(input) }
                return PKCS7_sign(signer.pointer, key.pointer, certificates, input, PKCS7_BINARY)
            }
        }
        guard let signed else { throw CryptoError.openSSL("PKCS7_sign") }
        defer { PKCS7_free(signed) }
        var output: UnsafeMutablePointer<UInt8>?
        let length = i2d_PKCS7(signed, &output)
        guard length > 0, let output else { throw CryptoError.openSSL("i2d_PKCS7") }
        defer { CRYPTO_free(output, #fileID, #line) }
        return Data(bytes: output, count: Int(length))
    }
}

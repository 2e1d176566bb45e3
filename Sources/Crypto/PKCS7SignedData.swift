import COpenSSL
import Foundation

/// A PKCS#7 SignedData container (as in StoreKit 1 app receipts); owns its `PKCS7*`.
///
/// `@unchecked Sendable`: immutable after parsing; each verification uses its own certificate stack and BIO.
public final class PKCS7SignedData: @unchecked Sendable {
    private let pointer: UnsafeMutablePointer<PKCS7>

    /// Parses DER; fails for anything that is not a SignedData with embedded content, and for bytes after it
    /// (they would ride along unsigned).
    public init(der: Data) throws {
        let parsed: UnsafeMutablePointer<PKCS7>? = withBytes(der) { base, count in
            var cursor: UnsafePointer<UInt8>? = base
            guard let container = d2i_PKCS7(nil, &cursor, count) else { return nil }
            guard cursor == base + count else {
                PKCS7_free(container)
                return nil
            }
            return container
        }
        guard let parsed else { throw CryptoError.openSSL("not a DER PKCS#7 structure, or bytes after it") }
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

    /// Every certificate embedded in the container, in its order (unverified).
    public var certificates: [Certificate] {
        guard let stack = pointer.pointee.d.sign?.pointee.cert else { return [] }
        return Certificate.retained(from: stack)
    }

    /// How many signatures the container holds.
    public var signerCount: Int {
        guard let infos = PKCS7_get_signer_info(pointer) else { return 0 }
        return Int(OPENSSL_sk_num(infos))
    }

    /// The embedded certificates that signed, one per signature (found by issuer and serial number); empty when
    /// a signature's certificate is not embedded.
    public var signers: [Certificate] {
        guard let stack = PKCS7_get0_signers(pointer, nil, 0) else {
            _ = drainedOpenSSLErrors()
            return []
        }
        defer { OPENSSL_sk_free(stack) } // The stack borrows the container's certificates.
        return Certificate.retained(from: stack)
    }

    /// Verifies the signature made with `signer`'s key over the content (and its signed attributes) and returns the
    /// content. Only the signature: whether `signer` is to be trusted is the caller's question (`ChainVerifier`).
    public func verifySignature(signer: Certificate) -> Result<Data, CryptoError> {
        guard let candidates = OPENSSL_sk_new_null() else { return .failure(.openSSL("OPENSSL_sk_new_null")) }
        defer { OPENSSL_sk_free(candidates) }
        OPENSSL_sk_push(candidates, UnsafeRawPointer(signer.pointer))
        guard let output = BIO_new(BIO_s_mem()) else { return .failure(.openSSL("BIO_new")) }
        defer { BIO_free(output) }
        // NOVERIFY: no chain building here (the caller verified `signer`'s chain); NOINTERN: the signature must be
        // `signer`'s, not that of some other certificate the container embeds.
        let flags = PKCS7_BINARY | PKCS7_NOVERIFY | PKCS7_NOINTERN
        let verified = withExtendedLifetime(signer) { PKCS7_verify(pointer, candidates, nil, nil, output, flags) }
        guard verified == 1 else { return .failure(.openSSL("the signature does not verify")) }
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

import COpenSSL
import Foundation

/// An X.509 certificate; owns its `X509*`.
///
/// `@unchecked Sendable`: the certificate is never mutated after construction, and OpenSSL's
/// read-only X509 functions may be called from several threads at once.
public final class Certificate: @unchecked Sendable {
    let pointer: OpaquePointer

    init(owning pointer: OpaquePointer) { self.pointer = pointer }

    deinit { X509_free(pointer) }

    /// The certificates of a `STACK_OF(X509)` that OpenSSL owns, each with a reference of its own.
    static func retained(from stack: OpaquePointer) -> [Certificate] {
        (0..<OPENSSL_sk_num(stack)).compactMap { index in
            guard let raw = OPENSSL_sk_value(stack, index) else { return nil }
            let certificate = OpaquePointer(raw)
            guard X509_up_ref(certificate) == 1 else { return nil }
            return Certificate(owning: certificate)
        }
    }

    /// Parses one DER-encoded certificate; trailing bytes are an error.
    public convenience init(der: Data) throws {
        let parsed: OpaquePointer? = withBytes(der) { base, count in
            var cursor: UnsafePointer<UInt8>? = base
            guard let certificate = d2i_X509(nil, &cursor, count) else { return nil }
            guard cursor == base + count else {
                X509_free(certificate)
                return nil
            }
            return certificate
        }
        guard let parsed else { throw CryptoError.openSSL("not a DER certificate") }
        self.init(owning: parsed)
    }

    /// Every certificate in a PEM bundle, or the one certificate of a DER file.
    public static func load(pemOrDER data: Data) throws -> [Certificate] {
        guard data.starts(with: Data("-----BEGIN".utf8)) || String(decoding: data.prefix(4096), as: UTF8.self).contains("-----BEGIN CERTIFICATE") else {
            return [try Certificate(der: data)]
        }
        var certificates: [Certificate] = []
        try withBytes(data) { base, count in
            guard let bio = BIO_new_mem_buf(base, Int32(count)) else { throw CryptoError.openSSL("BIO_new_mem_buf") }
            defer { BIO_free(bio) }
            while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) {
                certificates.append(Certificate(owning: certificate))
            }
        }
        _ = drainedOpenSSLErrors() // The read loop ends with a "no start line" error.
        guard !certificates.isEmpty else { throw CryptoError("no certificate in PEM data") }
        return certificates
    }

    /// The DER encoding.
    public var derRepresentation: Data {
        var output: UnsafeMutablePointer<UInt8>?
        let length = i2d_X509(pointer, &output)
        guard length > 0, let output else { return Data() }
        defer { CRYPTO_free(output, #fileID, #line) }
        return Data(bytes: output, count: Int(length))
    }

    /// The PEM encoding.
    public var pemRepresentation: String {
        let base64 = derRepresentation.base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return "-----BEGIN CERTIFICATE-----\n\(base64)\n-----END CERTIFICATE-----\n"
    }

    /// Whether the certificate carries an extension with this dotted OID (critical or not).
    public func hasExtension(oid: String) -> Bool {
        guard let object = OBJ_txt2obj(oid, 1) else {
            _ = drainedOpenSSLErrors()
            return false
        }
        defer { ASN1_OBJECT_free(object) }
        return X509_get_ext_by_OBJ(pointer, object, -1) >= 0
    }

    public var notBefore: Date? { Self.date(X509_get0_notBefore(pointer)) }
    public var notAfter: Date? { Self.date(X509_get0_notAfter(pointer)) }

    /// The subject as a one-line string, e.g. `/O=iap-pipeline test PKI/CN=Test Leaf`.
    public var subject: String {
        guard let name = X509_get_subject_name(pointer) else { return "" }
        var buffer = [CChar](repeating: 0, count: 512)
        guard X509_NAME_oneline(name, &buffer, Int32(buffer.count)) != nil else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether this certificate issued `other` (names and key identifiers match, signature aside).
    public func isIssuer(of other: Certificate) -> Bool {
        X509_check_issued(pointer, other.pointer) == X509_V_OK
    }

    /// The subject public key.
    public func publicKey() throws -> PublicKey {
        guard let key = X509_get_pubkey(pointer) else { throw CryptoError.openSSL("certificate has no usable public key") }
        return PublicKey(owning: key)
    }

    private static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Date? {
        guard let time else { return nil }
        var components = tm()
        guard ASN1_TIME_to_tm(time, &components) == 1 else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&components)))
    }
}

/// `BIO_get_mem_data` is a macro over `BIO_ctrl`.
func BIO_get_mem_data_shim(_ bio: OpaquePointer, _ data: inout UnsafeMutablePointer<CChar>?) -> Int {
    withUnsafeMutablePointer(to: &data) { Int(BIO_ctrl(bio, BIO_CTRL_INFO, 0, UnsafeMutableRawPointer($0))) }
}

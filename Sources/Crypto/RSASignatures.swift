import COpenSSL
import Foundation

/// RSA PKCS#1 v1.5 signatures, as Android-style stores (AppCoins/Catappult, like Google Play) sign purchase data.
public enum RSADigest: Sendable, CaseIterable {
    case sha1, sha256

    var md: OpaquePointer? {
        switch self {
        case .sha1: EVP_sha1()
        case .sha256: EVP_sha256()
        }
    }
}

extension PublicKey {
    /// A public key from DER SubjectPublicKeyInfo, or from the base64 of it (as stores' back offices show a key),
    /// or from PEM `BEGIN PUBLIC KEY`.
    public convenience init(subjectPublicKeyInfo text: Data) throws {
        let trimmed = String(decoding: text, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let der: Data
        if trimmed.hasPrefix("-----BEGIN PUBLIC KEY-----") {
            let body = trimmed.split(whereSeparator: \.isNewline).filter { !$0.hasPrefix("-----") }.joined()
            guard let decoded = Data(base64Encoded: body) else { throw CryptoError("not a PEM public key") }
            der = decoded
        } else if let decoded = Data(base64Encoded: trimmed.filter { !$0.isWhitespace }) {
            der = decoded
        } else {
            der = text
        }
        let key: OpaquePointer? = der.withUnsafeBytes { raw in
            var cursor = raw.bindMemory(to: UInt8.self).baseAddress.map { UnsafePointer($0) }
            return d2i_PUBKEY(nil, &cursor, raw.count)
        }
        guard let key else { throw CryptoError.openSSL("not a SubjectPublicKeyInfo public key") }
        self.init(owning: key)
    }

    /// Whether this is an RSA key of at least 2048 bits.
    public var isRSA2048OrMore: Bool { EVP_PKEY_get_base_id(pointer) == EVP_PKEY_RSA && EVP_PKEY_get_bits(pointer) >= 2048 }

    /// Verifies an RSA PKCS#1 v1.5 signature over `message` with `digest`; false for any other key type.
    public func verifyRSA(message: some DataProtocol & ContiguousBytes, signature: some DataProtocol & ContiguousBytes, digest: RSADigest) -> Bool {
        guard EVP_PKEY_get_base_id(pointer) == EVP_PKEY_RSA, let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, digest.md, nil, pointer) == 1 else { return false }
        let signatureBytes = Array(signature.withUnsafeBytes { Array($0) })
        return withBytes(message) { base, count in EVP_DigestVerify(context, signatureBytes, signatureBytes.count, base, count) } == 1
    }
}

extension PrivateKey {
    /// A fresh random RSA key (for test stores that sign purchase data).
    public static func generateRSA(bits: Int32 = 2048) throws -> PrivateKey {
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_RSA, nil) else { throw CryptoError.openSSL("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_rsa_keygen_bits(context, bits) == 1, EVP_PKEY_keygen(context, &key) == 1, let key
        else { throw CryptoError.openSSL("RSA key generation failed") }
        return PrivateKey(owning: key)
    }

    /// An RSA PKCS#1 v1.5 signature over `message`.
    public func signRSA(_ message: some DataProtocol & ContiguousBytes, digest: RSADigest) throws -> Data {
        guard let context = EVP_MD_CTX_new() else { throw CryptoError.openSSL("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, digest.md, nil, pointer) == 1 else { throw CryptoError.openSSL("EVP_DigestSignInit") }
        var length = 0
        guard withBytes(message, { base, count in EVP_DigestSign(context, nil, &length, base, count) }) == 1 else { throw CryptoError.openSSL("EVP_DigestSign") }
        var signature = [UInt8](repeating: 0, count: length)
        guard withBytes(message, { base, count in EVP_DigestSign(context, &signature, &length, base, count) }) == 1 else { throw CryptoError.openSSL("EVP_DigestSign") }
        return Data(signature.prefix(length))
    }

    /// The public half as base64 DER SubjectPublicKeyInfo, as a store's back office shows it.
    public func publicKeyBase64() throws -> String {
        var output: UnsafeMutablePointer<UInt8>?
        let length = i2d_PUBKEY(pointer, &output)
        guard length > 0, let output else { throw CryptoError.openSSL("i2d_PUBKEY") }
        defer { CRYPTO_free(output, #fileID, #line) }
        return Data(UnsafeBufferPointer(start: output, count: Int(length))).base64EncodedString()
    }
}

extension PrivateKey {
    /// Reads a PEM RSA private key of 2048 bits or more (PKCS#8 `BEGIN PRIVATE KEY`, as in a Google Cloud service
    /// account's key file, or PKCS#1 `BEGIN RSA PRIVATE KEY`).
    public convenience init(rsaPEM pem: Data) throws {
        let key = try Self.readPEM(pem)
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA, EVP_PKEY_get_bits(key) >= 2048 else {
            EVP_PKEY_free(key)
            throw CryptoError("the private key is not an RSA key of 2048 bits or more")
        }
        self.init(owning: key)
    }
}

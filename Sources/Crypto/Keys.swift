import COpenSSL
import Foundation
import Synchronization

/// A public key; owns its `EVP_PKEY*`.
///
/// `@unchecked Sendable`: the key is immutable, and OpenSSL allows concurrent use of one `EVP_PKEY` for
/// verification; the ES256 contexts are handed to one call at a time through a lock (`ES256Contexts`).
public final class PublicKey: @unchecked Sendable {
    let pointer: OpaquePointer
    /// Whether this is an elliptic-curve key on P-256 (the only key ES256 allows).
    public let isP256: Bool
    private let es256Contexts: ES256Contexts

    init(owning pointer: OpaquePointer) {
        self.pointer = pointer
        isP256 = Self.isP256(pointer)
        es256Contexts = ES256Contexts(key: pointer)
    }

    deinit { EVP_PKEY_free(pointer) }

    /// Whether `key` is an elliptic-curve key on P-256 itself: named by its group, not by its size (secp256k1 and the
    /// brainpool curves have 256 bits too, and ES256 allows none of them).
    static func isP256(_ key: OpaquePointer) -> Bool {
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_EC else { return false }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(key, &name, name.count, &length) == 1, length < name.count else { return false }
        return OBJ_sn2nid(name) == NID_X9_62_prime256v1
    }

    /// Verifies an ES256 signature in JWS form: the 64-byte concatenation r‖s (RFC 7518 §3.4).
    /// Anything that is not exactly 64 bytes, a DER signature included, fails.
    ///
    /// SHA-256 first, then the ECDSA verification of the digest on a context initialised for this key once and
    /// reused: `EVP_DigestVerifyInit` per call fetched the algorithms and built a context again each time, a tenth
    /// of a verification.
    public func verifyES256(message: some DataProtocol & ContiguousBytes, rawSignature: some DataProtocol & ContiguousBytes) -> Bool {
        guard isP256, rawSignature.count == 64 else { return false }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.maximumDERLength + 32) { buffer in
            let der = buffer.baseAddress!
            let digest = der + Self.maximumDERLength
            let derLength = withBytes(rawSignature) { base, _ in Self.writeDERSignature(raw: base, to: der) }
            guard withBytes(message, { base, count in sha256Digest(base, count, into: digest) }),
                  let context = es256Contexts.take() else {
                _ = drainedOpenSSLErrors()
                return false
            }
            defer { es256Contexts.giveBack(context) }
            let verified = EVP_PKEY_verify(context, der, derLength, digest, 32)
            if verified != 1 { _ = drainedOpenSSLErrors() }
            return verified == 1
        }
    }

    /// Verifies a DER ECDSA signature with SHA-256: OpenSSL's own verify, without JWS framing.
    /// (The baseline that `iap-harness bench verify` compares JWS verification with.)
    public func verifyECDSASHA256(message: some DataProtocol & ContiguousBytes, derSignature: [UInt8]) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, pointer) == 1 else { return false }
        let verified = withBytes(message) { base, count in EVP_DigestVerify(context, derSignature, derSignature.count, base, count) }
        if verified != 1 { _ = drainedOpenSSLErrors() }
        return verified == 1
    }

    /// The DER form of a 64-byte r‖s signature.
    public static func derSignature(fromRawSignature raw: Data) -> [UInt8]? {
        guard raw.count == 64 else { return nil }
        var der = [UInt8](repeating: 0, count: maximumDERLength)
        let length = der.withUnsafeMutableBufferPointer { out in withBytes(raw) { base, _ in writeDERSignature(raw: base, to: out.baseAddress!) } }
        return Array(der.prefix(length))
    }

    /// SEQUENCE (2) + two INTEGERs of at most 33 bytes (2 + 33 each).
    static let maximumDERLength = 72

    /// Writes r‖s (32 bytes each, big-endian) as the DER `ECDSA-Sig-Value` OpenSSL verifies, in its one valid
    /// encoding: each INTEGER without leading zero bytes, with one 0x00 before a first byte ≥ 0x80 (OpenSSL rejects
    /// any other encoding). Returns the length written (at most `maximumDERLength`).
    static func writeDERSignature(raw: UnsafePointer<UInt8>, to out: UnsafeMutablePointer<UInt8>) -> Int {
        var length = 2
        func writeInteger(_ bytes: UnsafePointer<UInt8>) {
            var first = 0
            while first < 31, bytes[first] == 0 { first += 1 }
            let padded = bytes[first] >= 0x80
            out[length] = 0x02
            out[length + 1] = UInt8(32 - first + (padded ? 1 : 0))
            length += 2
            if padded {
                out[length] = 0
                length += 1
            }
            (out + length).update(from: bytes + first, count: 32 - first)
            length += 32 - first
        }
        writeInteger(raw)
        writeInteger(raw + 32)
        out[0] = 0x30
        out[1] = UInt8(length - 2)
        return length
    }
}

/// `EVP_PKEY_CTX`s initialised for verifying with one key, each used by one call at a time and kept for the next.
private final class ES256Contexts: Sendable {
    private let key: UInt
    /// The contexts not in use, as bit patterns (an `OpaquePointer` is not `Sendable`).
    private let idle = Mutex<[UInt]>([])
    /// Enough for the threads that verify at once; a context beyond it is freed after its call.
    private static let kept = 16

    init(key: OpaquePointer) { self.key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(key))) }

    deinit {
        idle.withLock { contexts in
            for context in contexts { EVP_PKEY_CTX_free(OpaquePointer(bitPattern: context)) }
        }
    }

    func take() -> OpaquePointer? {
        if let context = idle.withLock({ $0.popLast() }) { return OpaquePointer(bitPattern: context) }
        guard let context = EVP_PKEY_CTX_new(OpaquePointer(bitPattern: key), nil) else { return nil }
        guard EVP_PKEY_verify_init(context) == 1 else {
            EVP_PKEY_CTX_free(context)
            return nil
        }
        return context
    }

    func giveBack(_ context: OpaquePointer) {
        let pattern = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(context)))
        let kept = idle.withLock { contexts in
            guard contexts.count < Self.kept else { return false }
            contexts.append(pattern)
            return true
        }
        if !kept { EVP_PKEY_CTX_free(context) }
    }
}

/// The SHA-256 implementation, fetched once: `EVP_sha256()` is looked up again at every use.
/// `nonisolated(unsafe)`: a fetched `EVP_MD` is immutable and OpenSSL allows its use from any thread.
private nonisolated(unsafe) let sha256Algorithm: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil)

/// SHA-256 of `count` bytes at `base` into the 32 bytes at `digest`.
private func sha256Digest(_ base: UnsafeRawPointer?, _ count: Int, into digest: UnsafeMutablePointer<UInt8>) -> Bool {
    EVP_Digest(base, count, digest, nil, sha256Algorithm, nil) == 1
}

/// A private key: EC P-256 (test data, App Store Server API tokens) or RSA (test stores' purchase data, Google service account tokens).
///
/// `@unchecked Sendable`: immutable after creation; each signature uses its own `EVP_MD_CTX`.
public final class PrivateKey: @unchecked Sendable {
    let pointer: OpaquePointer

    init(owning pointer: OpaquePointer) { self.pointer = pointer }
    deinit { EVP_PKEY_free(pointer) }

    /// A fresh random P-256 key.
    public static func generateP256() throws -> PrivateKey { try generate(curveNamed: SN_X9_62_prime256v1) }

    /// A fresh random key on the elliptic curve of OpenSSL's short name `curve` (tests make keys ES256 must refuse).
    static func generate(curveNamed curve: String) throws -> PrivateKey {
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil) else { throw CryptoError.openSSL("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1,
              EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context, OBJ_sn2nid(curve)) == 1,
              EVP_PKEY_keygen(context, &key) == 1, let key
        else { throw CryptoError.openSSL("\(curve) key generation failed") }
        return PrivateKey(owning: key)
    }

    /// Reads a PEM private key (PKCS#8 `BEGIN PRIVATE KEY`, as in App Store Connect `.p8` files, or `BEGIN EC PRIVATE KEY`).
    public convenience init(pem: Data) throws {
        let key = try Self.readPEM(pem)
        guard PublicKey.isP256(key) else {
            EVP_PKEY_free(key)
            throw CryptoError("the private key is not an EC P-256 key")
        }
        self.init(owning: key)
    }

    /// The key a PEM text holds, of any type; the caller owns it.
    static func readPEM(_ pem: Data) throws -> OpaquePointer {
        let key: OpaquePointer? = withBytes(pem) { base, count in
            guard let bio = BIO_new_mem_buf(base, Int32(count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let key else { throw CryptoError.openSSL("not a PEM private key") }
        return key
    }

    /// The PKCS#8 PEM encoding (`BEGIN PRIVATE KEY`).
    public func pemRepresentation() throws -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw CryptoError.openSSL("BIO_new") }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PrivateKey(bio, pointer, nil, nil, 0, nil, nil) == 1 else { throw CryptoError.openSSL("PEM_write_bio_PrivateKey") }
        var data: UnsafeMutablePointer<CChar>?
        let length = BIO_get_mem_data_shim(bio, &data)
        guard length > 0, let data else { throw CryptoError("empty PEM") }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    }

    /// The matching public key.
    public func publicKey() throws -> PublicKey {
        // Round-trip through DER SubjectPublicKeyInfo to get a key object without the private part.
        var output: UnsafeMutablePointer<UInt8>?
        let length = i2d_PUBKEY(pointer, &output)
        guard length > 0, let output else { throw CryptoError.openSSL("i2d_PUBKEY") }
        defer { CRYPTO_free(output, #fileID, #line) }
        var cursor: UnsafePointer<UInt8>? = UnsafePointer(output)
        guard let key = d2i_PUBKEY(nil, &cursor, Int(length)) else { throw CryptoError.openSSL("d2i_PUBKEY") }
        return PublicKey(owning: key)
    }

    /// An ES256 signature over `message` in JWS form (64-byte r‖s).
    public func signES256(_ message: some DataProtocol & ContiguousBytes) throws -> Data {
        guard let context = EVP_MD_CTX_new() else { throw CryptoError.openSSL("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, pointer) == 1 else { throw CryptoError.openSSL("EVP_DigestSignInit") }
        var der = [UInt8](repeating: 0, count: 80)
        var length = der.count
        let signed = withBytes(message) { base, count in EVP_DigestSign(context, &der, &length, base, count) }
        guard signed == 1 else { throw CryptoError.openSSL("EVP_DigestSign") }
        return try Self.rawSignature(fromDER: Array(der.prefix(length)))
    }

    private static func rawSignature(fromDER der: [UInt8]) throws -> Data {
        var cursor: UnsafePointer<UInt8>? = nil
        let signature: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            cursor = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature else { throw CryptoError.openSSL("d2i_ECDSA_SIG") }
        defer { ECDSA_SIG_free(signature) }
        var r: OpaquePointer?
        var s: OpaquePointer?
        ECDSA_SIG_get0(signature, &r, &s)
        var raw = [UInt8](repeating: 0, count: 64)
        let written = raw.withUnsafeMutableBufferPointer { buffer in
            BN_bn2binpad(r, buffer.baseAddress, 32) == 32 && BN_bn2binpad(s, buffer.baseAddress! + 32, 32) == 32
        }
        guard written else { throw CryptoError.openSSL("BN_bn2binpad") }
        return Data(raw)
    }
}

/// SHA-256 of `data`.
public func sha256(_ data: some DataProtocol & ContiguousBytes) -> Data {
    var digest = [UInt8](repeating: 0, count: 32)
    var length: UInt32 = 0
    _ = withBytes(data) { base, count in EVP_Digest(base, count, &digest, &length, EVP_sha256(), nil) }
    return Data(digest.prefix(Int(length)))
}

/// HMAC-SHA-256 of `data` under `key`.
public func hmacSHA256(key: Data, data: Data) -> Data {
    var digest = [UInt8](repeating: 0, count: 32)
    var length: UInt32 = 0
    _ = key.withUnsafeBytes { keyBytes in
        data.withUnsafeBytes { dataBytes in
            HMAC(EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count), dataBytes.baseAddress?.assumingMemoryBound(to: UInt8.self), dataBytes.count,
                 &digest, &length)
        }
    }
    return Data(digest.prefix(Int(length)))
}

/// Compares two byte strings in time independent of where they differ (for MACs).
public func constantTimeEquals(_ a: Data, _ b: Data) -> Bool {
    guard a.count == b.count else { return false }
    return zip(a, b).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
}

extension Data {
    /// Lower-case hexadecimal text of the bytes (digests, signatures).
    public var lowercaseHex: String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(count * 2)
        for byte in self {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// Bytes from hexadecimal text (either case); nil if it is not.
    public init?(hex: some StringProtocol) {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(hex.utf8.count / 2)
        var iterator = hex.utf8.makeIterator()
        while let high = iterator.next() {
            guard let low = iterator.next(), let h = Self.nibble(high), let l = Self.nibble(low) else { return nil }
            bytes.append(h << 4 | l)
        }
        self.init(bytes)
    }

    private static func nibble(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x61...0x66: byte - 0x61 + 10
        case 0x41...0x46: byte - 0x41 + 10
        default: nil
        }
    }
}

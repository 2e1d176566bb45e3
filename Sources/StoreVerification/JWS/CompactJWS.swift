import Foundation
import JSON

/// A compact JWS split into its three parts; payload and signature decoded, nothing verified.
/// The header is decoded on demand: when its chain is cached, it need not be decoded at all.
/// Works on the UTF-8 bytes throughout (a JWS is ASCII; anything else fails base64url).
struct CompactJWS {
    let payload: [String: JSONValue]
    let signature: [UInt8]
    /// The whole JWS; `signingInput` and `headerSegment` are ranges of it.
    let bytes: [UInt8]
    /// `BASE64URL(header) "." BASE64URL(payload)`: the bytes the signature covers.
    let signingInput: Range<Int>
    /// The header segment as sent, also the cache key for the certificate chain it names.
    let headerSegment: Range<Int>

    /// The largest JWS accepted; App Store payloads are a few KiB.
    static let maxLength = 64 * 1024

    static func parse(_ text: String) -> Result<CompactJWS, Rejection> {
        guard text.utf8.count <= maxLength else { return .failure(Rejection(.malformedJWS, "longer than \(maxLength) bytes")) }
        return parse(Array(text.utf8))
    }

    /// The same, from the JWS's bytes (not checked to be UTF-8: anything outside base64url and the two dots fails).
    static func parse(_ bytes: [UInt8]) -> Result<CompactJWS, Rejection> {
        guard bytes.count <= maxLength else { return .failure(Rejection(.malformedJWS, "longer than \(maxLength) bytes")) }
        let dot = UInt8(ascii: ".")
        guard let first = bytes.firstIndex(of: dot, from: 0), let second = bytes.firstIndex(of: dot, from: first + 1),
              bytes.firstIndex(of: dot, from: second + 1) == nil
        else { return .failure(Rejection(.malformedJWS, "expected 3 dot-separated parts")) }
        guard first > 0 else { return .failure(Rejection(.malformedJWS, "empty header")) }
        guard let payloadBytes = Base64URL.decode(bytes[(first + 1)..<second]), let payload = JSONValue.parse(payloadBytes)?.objectValue else {
            return .failure(Rejection(.malformedJWS, "payload is not a base64url-encoded JSON object"))
        }
        // An empty signature is left for the signature check to reject (unsigned Xcode data has none).
        let signatureSegment = bytes[(second + 1)...]
        let signature = signatureSegment.isEmpty ? [] : Base64URL.decode(signatureSegment)
        guard let signature else { return .failure(Rejection(.malformedJWS, "signature is not base64url")) }
        return .success(CompactJWS(payload: payload, signature: signature, bytes: bytes, signingInput: 0..<second, headerSegment: 0..<first))
    }

    /// The decoded header.
    func header() -> Result<[String: JSONValue], Rejection> {
        guard let decoded = Base64URL.decode(bytes[headerSegment]), let header = JSONValue.parse(decoded)?.objectValue else {
            return .failure(Rejection(.malformedJWS, "header is not a base64url-encoded JSON object"))
        }
        return .success(header)
    }
}

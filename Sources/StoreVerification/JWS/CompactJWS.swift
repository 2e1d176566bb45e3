import Foundation

/// A compact JWS split into its three parts; payload and signature decoded, nothing verified.
/// The header is decoded on demand: when its chain is cached, it need not be decoded at all.
struct CompactJWS {
    let payload: [String: JSONValue]
    let signature: [UInt8]
    /// `BASE64URL(header) "." BASE64URL(payload)`: the bytes the signature covers.
    let signingInput: Substring
    /// The header segment as sent, also the cache key for the certificate chain it names.
    let headerSegment: Substring

    /// The largest JWS accepted; App Store payloads are a few KiB.
    static let maxLength = 64 * 1024

    static func parse(_ text: String) -> Result<CompactJWS, Rejection> {
        guard text.utf8.count <= maxLength else { return .failure(Rejection(.malformedJWS, "longer than \(maxLength) bytes")) }
        let parts = text.split(separator: ".", maxSplits: 3, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return .failure(Rejection(.malformedJWS, "expected 3 dot-separated parts, found \(parts.count)")) }
        guard !parts[0].isEmpty else { return .failure(Rejection(.malformedJWS, "empty header")) }
        guard let payloadBytes = Base64URL.decode(parts[1]), let payload = JSONValue.parse(payloadBytes)?.objectValue else {
            return .failure(Rejection(.malformedJWS, "payload is not a base64url-encoded JSON object"))
        }
        // An empty signature is left for the signature check to reject (unsigned Xcode data has none).
        let signature = parts[2].isEmpty ? [] : Base64URL.decode(parts[2])
        guard let signature else { return .failure(Rejection(.malformedJWS, "signature is not base64url")) }
        let input = text[parts[0].startIndex..<parts[1].endIndex]
        return .success(CompactJWS(payload: payload, signature: signature, signingInput: input, headerSegment: parts[0]))
    }

    /// The decoded header.
    func header() -> Result<[String: JSONValue], Rejection> {
        guard let bytes = Base64URL.decode(headerSegment), let header = JSONValue.parse(bytes)?.objectValue else {
            return .failure(Rejection(.malformedJWS, "header is not a base64url-encoded JSON object"))
        }
        return .success(header)
    }
}

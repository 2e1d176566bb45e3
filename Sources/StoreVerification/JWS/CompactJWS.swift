import Foundation

/// A compact JWS split into its three parts, decoded but not verified.
struct CompactJWS {
    let header: [String: JSONValue]
    let payload: [String: JSONValue]
    let signature: Data
    /// `BASE64URL(header) "." BASE64URL(payload)`: the bytes the signature covers.
    let signingInput: Substring.UTF8View
    /// The header segment as sent, a cheap cache key for the certificate chain it names.
    let headerSegment: Substring

    /// The largest JWS accepted; App Store payloads are a few KiB.
    static let maxLength = 64 * 1024

    static func parse(_ text: String) -> Result<CompactJWS, Rejection> {
        guard text.utf8.count <= maxLength else { return .failure(Rejection(.malformedJWS, "longer than \(maxLength) bytes")) }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return .failure(Rejection(.malformedJWS, "expected 3 dot-separated parts, found \(parts.count)")) }
        guard let headerBytes = Base64URL.decode(parts[0]), let header = JSONValue.parse(headerBytes)?.objectValue else {
            return .failure(Rejection(.malformedJWS, "header is not base64url-encoded JSON object"))
        }
        guard let payloadBytes = Base64URL.decode(parts[1]), let payload = JSONValue.parse(payloadBytes)?.objectValue else {
            return .failure(Rejection(.malformedJWS, "payload is not a base64url-encoded JSON object"))
        }
        // An empty signature is left for the signature check to reject (unsigned Xcode data has none).
        let signature = parts[2].isEmpty ? Data() : Base64URL.decode(parts[2])
        guard let signature else { return .failure(Rejection(.malformedJWS, "signature is not base64url")) }
        let input = text[parts[0].startIndex..<parts[1].endIndex]
        return .success(CompactJWS(header: header, payload: payload, signature: signature, signingInput: input.utf8, headerSegment: parts[0]))
    }
}

import Crypto
import Foundation
import HTTPServer

/// The signature a backend puts on requests to the ingest's read side: HMAC-SHA-256 under a shared secret over
/// the method, the path, the query, a timestamp and the body's digest, so a captured request can neither be
/// pointed at another user nor replayed after `tolerance`.
///
/// ```
/// X-IAP-Timestamp: <Unix seconds>
/// X-IAP-Signature: v1=<hex HMAC-SHA-256(secret, "v1\n" METHOD "\n" PATH "\n" QUERY "\n" TIMESTAMP "\n" hex(SHA-256(body)))>
/// ```
/// PATH is the path as sent (percent-encoded), QUERY the text after `?` as sent (empty when none), a GET's body is
/// empty.
public enum RequestSignature {
    public static let timestampHeader = "x-iap-timestamp"
    public static let signatureHeader = "x-iap-signature"
    /// How far a request's timestamp may be from the server's clock, either way.
    public static let defaultTolerance: TimeInterval = 300

    /// Why a request's signature was refused.
    public enum Refusal: Error, Equatable, Sendable {
        case missing, malformedTimestamp, expired(tolerance: TimeInterval), mismatch

        public var detail: String {
            switch self {
            case .missing: "\(RequestSignature.timestampHeader) and \(RequestSignature.signatureHeader) are required"
            case .malformedTimestamp: "\(RequestSignature.timestampHeader) must be Unix seconds"
            case .expired(let tolerance): "\(RequestSignature.timestampHeader) is more than \(Int(tolerance)) s from the server's clock"
            case .mismatch: "\(RequestSignature.signatureHeader) is not v1=<hex HMAC-SHA-256 of the canonical request>"
            }
        }
    }

    /// The text that is signed.
    public static func canonical(method: String, path: String, query: String?, timestamp: Int64, body: Data) -> Data {
        Data("v1\n\(method)\n\(path)\n\(query ?? "")\n\(timestamp)\n\(sha256(body).lowercaseHex)".utf8)
    }

    /// The two headers a request carries, signed at `now`.
    public static func headers(secret: Data, method: String, path: String, query: String? = nil, body: Data = Data(),
                               now: Date = Date()) -> [String: String] {
        let timestamp = Int64(now.timeIntervalSince1970.rounded(.down))
        let mac = hmacSHA256(key: secret, data: canonical(method: method, path: path, query: query, timestamp: timestamp, body: body))
        return ["X-IAP-Timestamp": String(timestamp), "X-IAP-Signature": "v1=" + mac.lowercaseHex]
    }

    /// Checks `request`'s signature under `secret` at `now`.
    public static func verify(_ request: HTTPRequest, secret: Data, now: Date = Date(), tolerance: TimeInterval = defaultTolerance) -> Result<Void, Refusal> {
        guard let stamp = request.header(timestampHeader), let signature = request.header(signatureHeader) else { return .failure(.missing) }
        guard let timestamp = headerDecimal(stamp) else {
            return .failure(.malformedTimestamp)
        }
        // In whole seconds, as the timestamp is: against the fraction of the current second the window would be
        // -299…+300 s, not ±300 s.
        let seconds = Int64(now.timeIntervalSince1970.rounded(.down))
        guard abs(Double(timestamp - seconds)) <= tolerance else { return .failure(.expired(tolerance: tolerance)) }
        guard signature.hasPrefix("v1="), let given = Data(hex: signature.dropFirst(3)) else { return .failure(.mismatch) }
        let expected = hmacSHA256(key: secret, data: canonical(method: request.method, path: request.path, query: request.query,
                                                             timestamp: timestamp, body: request.body))
        return constantTimeEquals(given, expected) ? .success(()) : .failure(.mismatch)
    }
}

/// A shared secret as deployments mount it: a file whose surrounding ASCII whitespace (a trailing newline) is not part of
/// it. Its bytes as they are otherwise, whatever they are: the other side (a backend, a receiver) reads the same file's bytes.
public enum SharedSecret {
    /// The secret in the file at `path`; nil when it cannot be read.
    public static func read(file path: String) -> Data? {
        FileManager.default.contents(atPath: path).map(trimmed)
    }

    /// `bytes` without leading and trailing spaces, tabs, CR, LF, VT and FF (Python's `bytes.strip()`).
    static func trimmed(_ bytes: Data) -> Data {
        let isSpace = { (byte: UInt8) in byte == 0x20 || (0x09...0x0D).contains(byte) }
        guard let first = bytes.firstIndex(where: { !isSpace($0) }), let last = bytes.lastIndex(where: { !isSpace($0) }) else { return Data() }
        return Data(bytes[first...last])
    }
}

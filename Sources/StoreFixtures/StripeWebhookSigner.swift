import Crypto
import Foundation

/// Signs webhook deliveries as Stripe does: `Stripe-Signature: t=<Unix seconds>,v1=<hex HMAC-SHA-256(secret,
/// "<t>.<body>")>`, one `v1` per secret (an endpoint whose secret was rolled signs with both until the old one expires).
public struct StripeWebhookSigner: Sendable {
    /// The endpoint secrets it signs with, in order.
    public let secrets: [String]

    /// - Parameter secrets: none: a new one (`whsec_` and 32 random letters and digits).
    public init(secrets: [String] = []) {
        self.secrets = secrets.isEmpty ? [Self.newSecret()] : secrets
    }

    /// A new endpoint secret of Stripe's shape.
    public static func newSecret() -> String {
        "whsec_" + (UUID().uuidString + UUID().uuidString).replacingOccurrences(of: "-", with: "").prefix(32)
    }

    /// The `v1` signature of `body` at `timestamp` under `secret`, in lower-case hex.
    public static func signature(secret: String, timestamp: Int64, body: Data) -> String {
        hmacSHA256(key: Data(secret.utf8), data: Data("\(timestamp).".utf8) + body).lowercaseHex
    }

    /// The `Stripe-Signature` header of `body` sent at `date`.
    public func header(for body: Data, at date: Date = Date()) -> String {
        let timestamp = Int64(date.timeIntervalSince1970.rounded(.down))
        return (["t=\(timestamp)"] + secrets.map { "v1=" + Self.signature(secret: $0, timestamp: timestamp, body: body) }).joined(separator: ",")
    }
}

import Crypto
import Foundation

/// Checks the signature Stripe puts on each webhook delivery:
///
/// ```
/// Stripe-Signature: t=<Unix seconds>,v1=<hex HMAC-SHA-256(endpoint secret, "<t>.<raw body>")>[,v1=…][,v0=…]
/// ```
/// The key is the endpoint's signing secret (`whsec_…`) as its bytes. A delivery is taken when one of its `v1`
/// signatures is that of one of `secrets` (an endpoint whose secret was rolled signs with the old and the new one until
/// the old expires; either may be configured) and `t` is within `tolerance` of the clock, either way, against replays.
/// Other schemes (`v0`, test-mode's) and elements are ignored. Compared in constant time.
public struct StripeWebhookSignature: Sendable {
    public static let header = "stripe-signature"
    /// Stripe's libraries' default.
    public static let defaultTolerance: TimeInterval = 300

    /// Why a delivery's signature was refused.
    public enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        /// No `Stripe-Signature` header.
        case missingHeader
        /// No `t` element, or one that is not Unix seconds.
        case malformedTimestamp
        /// No `v1` element (only other schemes, or none).
        case noV1Signature
        /// `t` is further than the tolerance from the clock.
        case outsideTolerance(tolerance: TimeInterval)
        /// No `v1` signature is that of any configured secret over this body at `t` (a tampered body, another endpoint's
        /// secret, a signature that is not hex).
        case mismatch

        public var description: String {
            switch self {
            case .missingHeader: "no Stripe-Signature header"
            case .malformedTimestamp: "Stripe-Signature has no t=<Unix seconds>"
            case .noV1Signature: "Stripe-Signature has no v1 signature"
            case .outsideTolerance(let tolerance): "Stripe-Signature's timestamp is more than \(Int(tolerance)) s from the clock"
            case .mismatch: "no v1 signature is the HMAC-SHA-256 of the body under a configured endpoint secret"
            }
        }
    }

    /// The endpoint secrets taken (the current one, and during a roll the one before).
    public let secrets: [Data]
    public let tolerance: TimeInterval
    let now: @Sendable () -> Date

    /// - Parameter secrets: each endpoint secret as Stripe shows it (`whsec_…`); at least one.
    /// - Throws: `VerifierConfigurationError` for no secret, an empty one, or a negative tolerance.
    public init(secrets: [String], tolerance: TimeInterval = defaultTolerance, now: @escaping @Sendable () -> Date = Date.init) throws {
        guard !secrets.isEmpty, secrets.allSatisfy({ !$0.isEmpty }) else { throw VerifierConfigurationError("a Stripe webhook endpoint secret is required") }
        guard tolerance >= 0 else { throw VerifierConfigurationError("the tolerance of Stripe webhook timestamps cannot be negative") }
        self.secrets = secrets.map { Data($0.utf8) }
        self.tolerance = tolerance
        self.now = now
    }

    /// Nil when `header` (the `Stripe-Signature` value) signs `body` (the raw request body, exactly as received) under
    /// one of the secrets within the tolerance; else why not.
    public func refusal(header: String?, body: Data) -> Refusal? {
        guard let header else { return .missingHeader }
        var timestamp: Int64?
        var signatures: [Data?] = []
        for element in header.split(separator: ",", omittingEmptySubsequences: true) {
            let parts = element.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2 else { continue }
            let key = parts[0].trimmingASCIISpaces, value = parts[1].trimmingASCIISpaces
            if key == "t" {
                // The first `t` counts; a second cannot move the window.
                if timestamp == nil { timestamp = Self.decimal(value) ?? -1 }
            } else if key == "v1" {
                // 32 bytes in hex, else it matches nothing (kept to say `mismatch`, not `noV1Signature`).
                signatures.append(Data(hex: value).flatMap { $0.count == 32 ? $0 : nil })
            }
        }
        guard let timestamp, timestamp >= 0 else { return .malformedTimestamp }
        guard !signatures.isEmpty else { return .noV1Signature }
        // Whole seconds, as `t` is: the window is ±tolerance, not shifted by the current second's fraction.
        let seconds = now().timeIntervalSince1970.rounded(.down)
        guard abs(Double(timestamp) - seconds) <= tolerance else { return .outsideTolerance(tolerance: tolerance) }
        var signed = Data("\(timestamp).".utf8)
        signed.append(body)
        var matched = false
        // Every secret against every signature, with no early exit: the time taken says nothing of which matched.
        for secret in secrets {
            let expected = hmacSHA256(key: secret, data: signed)
            for case let signature? in signatures where constantTimeEquals(signature, expected) { matched = true }
        }
        return matched ? nil : .mismatch
    }

    /// Unix seconds written as Stripe writes them: 1 to 18 ASCII digits.
    static func decimal(_ text: Substring) -> Int64? {
        guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int64(text)
    }
}

extension Substring {
    /// Without leading and trailing spaces and tabs.
    fileprivate var trimmingASCIISpaces: Substring {
        var text = self
        while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" { text.removeLast() }
        return text
    }
}

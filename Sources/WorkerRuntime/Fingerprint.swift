import Crypto
import Foundation

/// A secret as logs name it: `sha256:` and the first 12 hex digits of the SHA-256 of its bytes. Purchase tokens,
/// account tokens, signatures and signed data are claimable or replayable by whoever reads them, so no log line carries
/// one; its fingerprint tells one from another, and an operator holding a token finds its lines with
/// `printf %s "$TOKEN" | sha256sum | cut -c1-12`.
///
/// `Logger` fingerprints by itself every field whose name says it holds a secret (`Logger.namesSecret`); a secret
/// logged under another name, or in a message's text, is passed as a `Fingerprint`.
public struct Fingerprint: Sendable, Hashable, CustomStringConvertible {
    /// `sha256:` and 12 lower-case hex digits.
    public let description: String

    /// The fingerprint of `secret`'s UTF-8 bytes (of an `Identifier`'s, through its description).
    public init(_ secret: some CustomStringConvertible) {
        self.init(bytes: Data(secret.description.utf8))
    }

    public init(bytes: Data) {
        description = "sha256:" + sha256(bytes).prefix(6).lowercaseHex
    }
}

extension Fingerprint {
    /// Bytes of the longest transaction id any store gives (the App Store's are digits, Google Play's `GPA.` order ids and
    /// AppCoins' ids a few dozen characters): a longer one is a Google Play purchase token standing for an order id the
    /// purchase does not have (a test or promotional purchase's).
    public static let longestTransactionId = 64

    /// A transaction id as logs and error messages name it: as it is, or its fingerprint when it is a purchase token
    /// (`longestTransactionId`).
    public static func transactionId(_ id: some CustomStringConvertible) -> String {
        let text = id.description
        return text.utf8.count > longestTransactionId ? Fingerprint(text).description : text
    }
}

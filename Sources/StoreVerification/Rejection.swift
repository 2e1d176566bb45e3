import PurchaseDomain

/// Why a purchase was not accepted. New reasons can be added without breaking callers that
/// switch over the known ones, since each is a value with a stable raw string.
public struct RejectionReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible, Codable {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    // Signed data (JWS)
    public static let malformedJWS = Self(rawValue: "malformedJWS")
    public static let unsupportedAlgorithm = Self(rawValue: "unsupportedAlgorithm")
    public static let missingX5C = Self(rawValue: "missingX5C")
    public static let invalidChainLength = Self(rawValue: "invalidChainLength")
    public static let untrustedChain = Self(rawValue: "untrustedChain")
    public static let certificateExpired = Self(rawValue: "certificateExpired")
    public static let missingAppleOID = Self(rawValue: "missingAppleOID")
    public static let badSignature = Self(rawValue: "badSignature")
    public static let certificateRevoked = Self(rawValue: "certificateRevoked")
    public static let revocationCheckFailed = Self(rawValue: "revocationCheckFailed")
    // What the signed data says
    public static let malformedPayload = Self(rawValue: "malformedPayload")
    public static let wrongBundleId = Self(rawValue: "wrongBundleId")
    public static let wrongEnvironment = Self(rawValue: "wrongEnvironment")
    public static let wrongAppAppleId = Self(rawValue: "wrongAppAppleId")
    // App receipts (StoreKit 1)
    public static let malformedReceipt = Self(rawValue: "malformedReceipt")
    public static let receiptSignatureInvalid = Self(rawValue: "receiptSignatureInvalid")
    /// A receipt past its expiration date (field 21, which only Volume Purchase Program copies carry).
    public static let receiptExpired = Self(rawValue: "receiptExpired")
    /// A genuine receipt that lists no in-app purchase: nothing to grant, answered so that the submitter hears so.
    public static let noPurchases = Self(rawValue: "noPurchases")
    // Store API checks (AppCoins)
    public static let storeRejected = Self(rawValue: "storeRejected")
    public static let storeUnavailable = Self(rawValue: "storeUnavailable")
    public static let purchaseNotCompleted = Self(rawValue: "purchaseNotCompleted")
    /// Paid with a method that settles later (AppCoins `purchaseState` 2): neither granted nor refused yet.
    public static let purchasePending = Self(rawValue: "purchasePending")
    /// A package that is not one of the operator's apps.
    public static let wrongPackage = Self(rawValue: "wrongPackage")
    /// A submission without the store's signed purchase data (the shape before AppCoins purchases were signed).
    public static let signatureRequired = Self(rawValue: "signatureRequired")
    // Web purchases (Stripe Checkout)
    /// A purchase made for another user than the one submitting it (Stripe's `client_reference_id`), or for none.
    public static let wrongUser = Self(rawValue: "wrongUser")
}

/// A purchase that was not accepted: the reason, whether trying again later may succeed, and detail
/// for logs. Retryable rejections (a store API timing out, an OCSP responder unreachable) say
/// nothing about the purchase itself.
public struct Rejection: Error, Sendable, Equatable, CustomStringConvertible {
    public let reason: RejectionReason
    public let isRetryable: Bool
    public let detail: String

    public init(_ reason: RejectionReason, retryable: Bool = false, _ detail: String = "") {
        self.reason = reason
        self.isRetryable = retryable
        self.detail = detail
    }

    public var description: String {
        "\(reason)\(isRetryable ? " (retryable)" : "")\(detail.isEmpty ? "" : ": \(detail)")"
    }
}

extension Rejection {
    /// The signed data's first id (its field's name, its value if present, its `IdentifierLimits`) that the event schemas
    /// cannot carry (`IdentifierRule`), as a `malformedPayload` rejection naming the field and why; nil when all can be.
    /// Signed by the store or not, the values are still outside input: refused here rather than published in an event
    /// its schema refuses, or sent to a database that takes no NUL.
    static func unfitId(_ ids: KeyValuePairs<String, (String?, maxLength: Int)>, of what: String) -> Rejection? {
        for (field, (value, maxLength)) in ids {
            guard let value, let fault = IdentifierRule.fault(of: value, maxLength: maxLength) else { continue }
            return Rejection(.malformedPayload, "the \(what)'s \(field) \(fault): no event can carry it")
        }
        return nil
    }
}

import Crypto
import Foundation
import StoreVerification
import JSON

/// Signs App Store-shaped JWS with a `TestPKI`, the way the App Store signs transactions and notifications.
public struct JWSSigner: Sendable {
    public let pki: TestPKI

    public init(pki: TestPKI) { self.pki = pki }

    /// A compact JWS of `payload`. `header` entries replace the defaults (`alg: ES256`, `x5c`), for tests of
    /// malformed headers; set a value to `.null` to drop that entry.
    public func sign(_ payload: [String: JSONValue], header overrides: [String: JSONValue] = [:]) throws -> String {
        var header: [String: JSONValue] = ["alg": .string("ES256"), "x5c": .array(pki.x5c.map(JSONValue.string))]
        for (key, value) in overrides { header[key] = value == .null ? nil : value }
        let signingInput = try Base64URL.encode(Self.encode(.object(header))) + "." + Base64URL.encode(Self.encode(.object(payload)))
        let signature = try pki.leafKey.signES256(Data(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    static func encode(_ value: JSONValue) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(value)
    }
}

/// Payloads shaped like the App Store's, with sensible defaults.
public enum AppStorePayloads {
    /// A JWSTransactionDecodedPayload.
    public static func transaction(
        transactionId: String, originalTransactionId: String? = nil, productId: String, bundleId: String,
        environment: AppStoreEnvironment = .sandbox, type: AppStoreProductType = .consumable, quantity: Int = 1,
        purchaseDate: Date = Date(), signedDate: Date = Date(), appAccountToken: String? = nil,
        price: Int64? = 990, currency: String? = "USD", revocationDate: Date? = nil, extra: [String: JSONValue] = [:]
    ) -> [String: JSONValue] {
        var payload: [String: JSONValue] = [
            "transactionId": .string(transactionId),
            "originalTransactionId": .string(originalTransactionId ?? transactionId),
            "bundleId": .string(bundleId),
            "productId": .string(productId),
            "type": .string(type.rawValue),
            "quantity": .integer(Int64(quantity)),
            "purchaseDate": .integer(milliseconds(purchaseDate)),
            "originalPurchaseDate": .integer(milliseconds(purchaseDate)),
            "signedDate": .integer(milliseconds(signedDate)),
            "environment": .string(environment.rawValue),
            "inAppOwnershipType": .string("PURCHASED"),
            "transactionReason": .string("PURCHASE"),
            "storefront": .string("USA"),
        ]
        if let appAccountToken { payload["appAccountToken"] = .string(appAccountToken) }
        if let price { payload["price"] = .integer(price) }
        if let currency { payload["currency"] = .string(currency) }
        if let revocationDate {
            payload["revocationDate"] = .integer(milliseconds(revocationDate))
            payload["revocationReason"] = .integer(0)
        }
        return payload.merging(extra) { _, new in new }
    }

    /// A ResponseBodyV2DecodedPayload carrying signed transaction info.
    public static func notification(
        type: AppStoreNotificationType, subtype: String? = nil, uuid: String = UUID().uuidString.lowercased(),
        bundleId: String, appAppleId: Int64?, environment: AppStoreEnvironment = .sandbox,
        signedTransactionInfo: String?, signedRenewalInfo: String? = nil, signedDate: Date = Date()
    ) -> [String: JSONValue] {
        var data: [String: JSONValue] = ["bundleId": .string(bundleId), "environment": .string(environment.rawValue), "bundleVersion": .string("1")]
        if let appAppleId { data["appAppleId"] = .integer(appAppleId) }
        if let signedTransactionInfo { data["signedTransactionInfo"] = .string(signedTransactionInfo) }
        if let signedRenewalInfo { data["signedRenewalInfo"] = .string(signedRenewalInfo) }
        var payload: [String: JSONValue] = [
            "notificationType": .string(type.rawValue), "notificationUUID": .string(uuid), "version": .string("2.0"),
            "signedDate": .integer(milliseconds(signedDate)), "data": .object(data),
        ]
        if let subtype { payload["subtype"] = .string(subtype) }
        return payload
    }

    /// A JWSRenewalInfoDecodedPayload of the subscription `originalTransactionId`, in its billing grace period until
    /// `gracePeriodExpiresDate` when one is given; `extra` entries replace or add fields (`autoRenewStatus`,
    /// `priceIncreaseStatus`, `offerType`, …).
    public static func renewalInfo(originalTransactionId: String, productId: String, environment: AppStoreEnvironment = .sandbox,
                                   gracePeriodExpiresDate: Date? = nil, signedDate: Date = Date(), extra: [String: JSONValue] = [:]) -> [String: JSONValue] {
        var payload: [String: JSONValue] = [
            "originalTransactionId": .string(originalTransactionId), "productId": .string(productId), "autoRenewProductId": .string(productId),
            "autoRenewStatus": .integer(1), "environment": .string(environment.rawValue), "signedDate": .integer(milliseconds(signedDate)),
        ]
        if let gracePeriodExpiresDate {
            payload["gracePeriodExpiresDate"] = .integer(milliseconds(gracePeriodExpiresDate))
            payload["isInBillingRetryPeriod"] = .bool(true)
        }
        return payload.merging(extra) { _, new in new }
    }

    public static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }
}

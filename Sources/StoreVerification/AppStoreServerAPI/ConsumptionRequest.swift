import Foundation
import JSON

/// The body of *Send Consumption Information* (`ConsumptionRequest`, App Store Server API 1.19+): what the
/// customer received of the In-App Purchase whose refund they asked for.
public struct ConsumptionRequest: Sendable, Hashable {
    /// `deliveryStatus`: whether the app delivered the purchase and it works. The raw value is kept beside the
    /// cases Apple documents today.
    public struct DeliveryStatus: RawRepresentable, Sendable, Hashable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        public static let delivered = Self(rawValue: "DELIVERED")
        public static let undeliveredQualityIssue = Self(rawValue: "UNDELIVERED_QUALITY_ISSUE")
        public static let undeliveredWrongItem = Self(rawValue: "UNDELIVERED_WRONG_ITEM")
        public static let undeliveredServerOutage = Self(rawValue: "UNDELIVERED_SERVER_OUTAGE")
        public static let undeliveredOther = Self(rawValue: "UNDELIVERED_OTHER")
    }

    /// `refundPreference`: the developer's wish; Apple decides.
    public struct RefundPreference: RawRepresentable, Sendable, Hashable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        public static let decline = Self(rawValue: "DECLINE")
        public static let grantFull = Self(rawValue: "GRANT_FULL")
        public static let grantProrated = Self(rawValue: "GRANT_PRORATED")
    }

    /// Must be true: Apple refuses anything else (`InvalidCustomerConsentedError`), and without consent nothing
    /// is sent at all.
    public var customerConsented: Bool
    public var deliveryStatus: DeliveryStatus
    public var sampleContentProvided: Bool
    /// Milliunits, 0…100000. Must be 0 unless delivered; must be absent for an auto-renewable subscription.
    public var consumptionPercentage: Int?
    public var refundPreference: RefundPreference?

    public init(customerConsented: Bool, deliveryStatus: DeliveryStatus, sampleContentProvided: Bool, consumptionPercentage: Int? = nil,
                refundPreference: RefundPreference? = nil) {
        self.customerConsented = customerConsented
        self.deliveryStatus = deliveryStatus
        self.sampleContentProvided = sampleContentProvided
        self.consumptionPercentage = consumptionPercentage
        self.refundPreference = refundPreference
    }

    /// The JSON body, fields absent when nil.
    public func jsonBody() -> Data {
        var object: [String: JSONValue] = [
            "customerConsented": .bool(customerConsented), "deliveryStatus": .string(deliveryStatus.rawValue),
            "sampleContentProvided": .bool(sampleContentProvided),
        ]
        if let consumptionPercentage { object["consumptionPercentage"] = .integer(Int64(consumptionPercentage)) }
        if let refundPreference { object["refundPreference"] = .string(refundPreference.rawValue) }
        return Data(JSONValue.object(object).serialized)
    }
}

import PurchaseDomain

/// A string value from the App Store that may take values unknown to this version: the raw string is
/// always kept, and the known values are named constants to compare with.
public protocol AppStoreStringValue: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible where RawValue == String {
    init(rawValue: String)
}

extension AppStoreStringValue {
    public var description: String { rawValue }
}

/// The App Store environment data was signed for.
public struct AppStoreEnvironment: AppStoreStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let production = Self(rawValue: "Production")
    public static let sandbox = Self(rawValue: "Sandbox")
    /// StoreKit Testing in Xcode: not signed by the App Store.
    public static let xcode = Self(rawValue: "Xcode")
    /// Local StoreKit testing: not signed by the App Store.
    public static let localTesting = Self(rawValue: "LocalTesting")

    /// Data of these environments is signed locally, not by Apple.
    public var isLocallySigned: Bool { self == .xcode || self == .localTesting }
}

/// The kind of in-app product (`type` of a signed transaction).
public struct AppStoreProductType: AppStoreStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let consumable = Self(rawValue: "Consumable")
    public static let nonConsumable = Self(rawValue: "Non-Consumable")
    public static let autoRenewable = Self(rawValue: "Auto-Renewable Subscription")
    public static let nonRenewing = Self(rawValue: "Non-Renewing Subscription")
}

/// `notificationType` of an App Store Server Notification V2.
public struct AppStoreNotificationType: AppStoreStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let refund = Self(rawValue: "REFUND")
    public static let revoke = Self(rawValue: "REVOKE")
    public static let refundReversed = Self(rawValue: "REFUND_REVERSED")
    public static let refundDeclined = Self(rawValue: "REFUND_DECLINED")
    public static let consumptionRequest = Self(rawValue: "CONSUMPTION_REQUEST")
    public static let oneTimeCharge = Self(rawValue: "ONE_TIME_CHARGE")
    public static let test = Self(rawValue: "TEST")
    public static let subscribed = Self(rawValue: "SUBSCRIBED")
    public static let didRenew = Self(rawValue: "DID_RENEW")
    public static let expired = Self(rawValue: "EXPIRED")
    public static let gracePeriodExpired = Self(rawValue: "GRACE_PERIOD_EXPIRED")
    public static let renewalExtended = Self(rawValue: "RENEWAL_EXTENDED")
    public static let didFailToRenew = Self(rawValue: "DID_FAIL_TO_RENEW")
    public static let didChangeRenewalPref = Self(rawValue: "DID_CHANGE_RENEWAL_PREF")
    public static let offerRedeemed = Self(rawValue: "OFFER_REDEEMED")
    public static let didChangeRenewalStatus = Self(rawValue: "DID_CHANGE_RENEWAL_STATUS")
    public static let priceIncrease = Self(rawValue: "PRICE_INCREASE")
    /// The outcome of a renewal-date extension requested for many subscribers at once (`summary`, or `data` when one failed).
    public static let renewalExtension = Self(rawValue: "RENEWAL_EXTENSION")
    /// External purchases (`externalPurchaseToken` instead of `data`).
    public static let externalPurchaseToken = Self(rawValue: "EXTERNAL_PURCHASE_TOKEN")
    /// A parent or guardian withdrew consent for a minor's use of the app (`appData` instead of `data`).
    public static let rescindConsent = Self(rawValue: "RESCIND_CONSENT")
    /// Advanced Commerce API subscriptions: metadata, a migration, or a price changed.
    public static let metadataUpdate = Self(rawValue: "METADATA_UPDATE")
    public static let migration = Self(rawValue: "MIGRATION")
    public static let priceChange = Self(rawValue: "PRICE_CHANGE")

    /// What the pipeline does with a notification of this type and `subtype`.
    public func pipelineAction(subtype: String?) -> NotificationAction {
        switch self {
        case .refund, .revoke: .revokeGrant
        case .refundReversed: .restoreGrant
        case .refundDeclined: .recordDecision
        case .consumptionRequest: .reportConsumption
        // An offer redeemed starts or changes a subscription: its transaction is the new period, or the current one again.
        case .oneTimeCharge, .subscribed, .didRenew, .renewalExtended, .offerRedeemed: .recordPurchase
        // An upgrade starts a new period of the higher level at once; a downgrade waits for the renewal (a new transaction then).
        case .didChangeRenewalPref: subtype == "UPGRADE" ? .recordPurchase : .logOnly
        // In a billing grace period service continues until it ends; in billing retry alone the period ends at its expiry.
        case .didFailToRenew: subtype == "GRACE_PERIOD" ? .extendIntoGracePeriod : .logOnly
        case .expired, .gracePeriodExpired: .endEntitlement
        case .test: .acknowledgeTest
        default: .logOnly
        }
    }
}

/// The pipeline's reaction to a notification.
public enum NotificationAction: String, Sendable, Codable {
    /// Money went back to the customer (REFUND) or access was withdrawn (REVOKE): claw back the grant.
    case revokeGrant
    /// A refund was reversed: the grant stands again.
    case restoreGrant
    /// Apple asks for consumption information about a refund request.
    case reportConsumption
    /// A purchase was charged (a one-time charge; a subscription bought, renewed, upgraded or started with an offer),
    /// or its renewal date moved (RENEWAL_EXTENDED, the transaction signed again with a later `expiresDate`): its
    /// transaction is processed like a client submission, for the user who owns the subscription.
    case recordPurchase
    /// A subscription ended (expired, grace period over): its entitlement ends.
    case endEntitlement
    /// A renewal failed and its billing grace period began (DID_FAIL_TO_RENEW, GRACE_PERIOD): the period's
    /// entitlement lasts until the grace period ends (the renewal info's `gracePeriodExpiresDate`).
    case extendIntoGracePeriod
    /// The store decided something that changes nothing (a refund request declined): recorded in the log.
    case recordDecision
    /// A TEST notification from App Store Connect.
    case acknowledgeTest
    /// Known or unknown, but nothing for the pipeline to do: counted and logged.
    case logOnly
}

extension Dictionary where Key == AppStoreEnvironment {
    /// What is kept for the environment a record names (`environment`, as recorded), or, for a record that names none,
    /// the only one kept (the deployment's own); nil otherwise.
    public func forRecorded(environment: String?) -> Value? {
        guard let environment else { return count == 1 ? values.first : nil }
        return self[AppStoreEnvironment(rawValue: environment)]
    }
}

/// An App Store app whose signed data and receipts a verifier accepts: its bundle id, and its Apple id (`appAppleId`,
/// required in production, where notifications and app transactions name it).
public struct AppStoreApp: Sendable, Hashable {
    public var bundleId: BundleID
    public var appAppleId: Int64?

    public init(bundleId: BundleID, appAppleId: Int64? = nil) {
        self.bundleId = bundleId
        self.appAppleId = appAppleId
    }

    /// What a rejection says was expected: `'com.a'`, or `one of 'com.a', 'com.b'`.
    static func expected(_ apps: [AppStoreApp]) -> String {
        let quoted = apps.map { "'\($0.bundleId)'" }
        return quoted.count == 1 ? quoted[0] : "one of \(quoted.joined(separator: ", "))"
    }
}

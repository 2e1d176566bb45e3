import PurchaseDomain
import Foundation
import JSON

/// A verified, decoded signed transaction (JWSTransactionDecodedPayload).
public struct AppStoreTransaction: Sendable, Hashable {
    public var transactionId: TransactionID
    public var originalTransactionId: TransactionID?
    public var webOrderLineItemId: String?
    public var bundleId: BundleID
    public var productId: ProductID
    public var type: AppStoreProductType?
    public var quantity: Int
    public var purchaseDate: Date?
    public var originalPurchaseDate: Date?
    public var expiresDate: Date?
    public var signedDate: Date?
    public var appAccountToken: AccountToken?
    public var environment: AppStoreEnvironment?
    public var storefront: String?
    public var price: Int64?
    public var currency: String?
    public var revocationDate: Date?
    public var revocationReason: Int64?
    /// `REFUND_FULL`, `REFUND_PRORATED` or `FAMILY_REVOKE` (raw: values Apple adds later are kept).
    public var revocationType: String?
    /// The share refunded or revoked, in thousandths of a percent (100000 = all); absent once a refund is reversed.
    public var revocationPercentage: Int64?
    public var transactionReason: String?
    public var inAppOwnershipType: String?
    /// Every field as signed, including ones this version does not know.
    public var raw: [String: JSONValue]

    init?(_ fields: [String: JSONValue]) {
        let json = JSONFields(object: fields)
        guard let transactionId: TransactionID = json.identifier("transactionId"), let bundleId: BundleID = json.identifier("bundleId"),
              let productId: ProductID = json.identifier("productId") else { return nil }
        self.transactionId = transactionId
        self.bundleId = bundleId
        self.productId = productId
        originalTransactionId = json.identifier("originalTransactionId")
        webOrderLineItemId = json.string("webOrderLineItemId")
        type = json.string("type").map(AppStoreProductType.init(rawValue:))
        quantity = Int(json.int("quantity") ?? 1)
        purchaseDate = json.date("purchaseDate")
        originalPurchaseDate = json.date("originalPurchaseDate")
        expiresDate = json.date("expiresDate")
        signedDate = json.date("signedDate")
        appAccountToken = json.identifier("appAccountToken")
        environment = json.string("environment").map(AppStoreEnvironment.init(rawValue:))
        storefront = json.string("storefront")
        price = json.int("price")
        currency = json.string("currency")
        revocationDate = json.date("revocationDate")
        revocationReason = json.int("revocationReason")
        revocationType = json.string("revocationType")
        revocationPercentage = json.int("revocationPercentage")
        transactionReason = json.string("transactionReason")
        inAppOwnershipType = json.string("inAppOwnershipType")
        raw = fields
    }
}

/// A verified, decoded signed renewal info (JWSRenewalInfoDecodedPayload).
public struct AppStoreRenewalInfo: Sendable, Hashable {
    public var originalTransactionId: TransactionID
    public var productId: ProductID?
    public var autoRenewProductId: String?
    public var autoRenewStatus: Int64?
    public var expirationIntent: Int64?
    public var renewalDate: Date?
    /// Set while a failed renewal's billing grace period runs (`DID_FAIL_TO_RENEW`, `GRACE_PERIOD`): service continues until then.
    public var gracePeriodExpiresDate: Date?
    /// Whether the App Store is still trying to renew a subscription whose renewal failed on billing.
    public var isInBillingRetryPeriod: Bool?
    /// 0: the customer has not responded to a price increase; 1: consented, or was notified of one that needs no consent.
    public var priceIncreaseStatus: Int64?
    /// 1 introductory, 2 promotional, 3 offer code, 4 win-back (raw: values Apple adds later are kept).
    public var offerType: Int64?
    /// The promotional offer's, offer code's or win-back offer's identifier.
    public var offerIdentifier: String?
    public var signedDate: Date?
    public var environment: AppStoreEnvironment?
    public var raw: [String: JSONValue]

    init?(_ fields: [String: JSONValue]) {
        let json = JSONFields(object: fields)
        guard let originalTransactionId: TransactionID = json.identifier("originalTransactionId") else { return nil }
        self.originalTransactionId = originalTransactionId
        productId = json.identifier("productId")
        autoRenewProductId = json.string("autoRenewProductId")
        autoRenewStatus = json.int("autoRenewStatus")
        expirationIntent = json.int("expirationIntent")
        renewalDate = json.date("renewalDate")
        gracePeriodExpiresDate = json.date("gracePeriodExpiresDate")
        isInBillingRetryPeriod = json.bool("isInBillingRetryPeriod")
        priceIncreaseStatus = json.int("priceIncreaseStatus")
        offerType = json.int("offerType")
        offerIdentifier = json.string("offerIdentifier")
        signedDate = json.date("signedDate")
        environment = json.string("environment").map(AppStoreEnvironment.init(rawValue:))
        raw = fields
    }
}

/// A verified App Store Server Notification V2 (ResponseBodyV2DecodedPayload), with its nested
/// signed transaction and renewal info verified too.
public struct AppStoreNotification: Sendable, Hashable {
    public var notificationType: AppStoreNotificationType
    public var subtype: String?
    public var notificationUUID: String
    public var version: String?
    public var signedDate: Date?
    public var bundleId: BundleID?
    public var appAppleId: Int64?
    public var environment: AppStoreEnvironment?
    public var transaction: AppStoreTransaction?
    public var renewalInfo: AppStoreRenewalInfo?
    /// The app transaction of a `RESCIND_CONSENT` notification (`appData.signedAppTransactionInfo`), verified.
    public var appTransaction: AppStoreAppTransaction?
    public var raw: [String: JSONValue]

    /// What the pipeline does with it.
    public var action: NotificationAction { notificationType.pipelineAction(subtype: subtype) }
}

/// A verified, decoded signed AppTransaction (the app's own purchase record).
public struct AppStoreAppTransaction: Sendable, Hashable {
    public var bundleId: BundleID
    public var appAppleId: Int64?
    public var environment: AppStoreEnvironment?
    public var applicationVersion: String?
    public var originalApplicationVersion: String?
    public var receiptCreationDate: Date?
    public var originalPurchaseDate: Date?
    public var appTransactionId: String?
    public var raw: [String: JSONValue]

    init?(_ fields: [String: JSONValue]) {
        let json = JSONFields(object: fields)
        guard let bundleId: BundleID = json.identifier("bundleId") else { return nil }
        self.bundleId = bundleId
        appAppleId = json.int("appAppleId")
        environment = json.string("receiptType").map(AppStoreEnvironment.init(rawValue:))
        applicationVersion = json.string("applicationVersion")
        originalApplicationVersion = json.string("originalApplicationVersion")
        receiptCreationDate = json.date("receiptCreationDate")
        originalPurchaseDate = json.date("originalPurchaseDate")
        appTransactionId = json.string("appTransactionId")
        raw = fields
    }
}

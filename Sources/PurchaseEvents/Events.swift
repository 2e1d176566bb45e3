import Foundation
import PurchaseDomain

/// An event of the pipeline: its type, the message key (the user id, so one user's purchases stay
/// in order on one partition) and a CloudEvents id.
public protocol PipelineEvent: Codable, Sendable {
    static var type: EventType { get }
    /// The Kafka message key: the user id, so one user's events stay in order on one partition.
    var messageKey: Data? { get }
    /// `ce_id`: for derived events deterministic (e.g. `granted:appstore:2000…`), so that a redelivered
    /// event is recognisably the same one.
    var eventID: String { get }
}

public enum SubmissionKind: String, Codable, Sendable { case signedTransaction, appReceipt, appcoinsPurchase, googlePlayPurchase, stripeCheckout }
public enum SubmissionSource: String, Codable, Sendable { case client, server, restore }

/// `purchase.submitted`: a purchase for the verifier, from an app backend, the ingest endpoint or a restore.
public struct PurchaseSubmitted: PipelineEvent, Hashable {
    public static let type = EventType.purchaseSubmitted
    /// An AppCoins purchase as the billing SDK gives it to the app: the purchase JSON exactly as signed
    /// (`purchaseData`, the SDK's original JSON) and its base64 `signature` by the app's key, besides the package,
    /// SKU and token it names.
    public struct AppCoinsPurchase: Codable, Sendable, Hashable {
        public var packageName: PackageName
        public var sku: ProductID
        public var purchaseToken: PurchaseToken
        /// Required by the verifier; optional in the schema so that a submission of the earlier shape is answered
        /// `purchase.rejected` (`signatureRequired`) rather than dead-lettered unanswered.
        public var purchaseData: String?
        public var signature: String?
        public init(packageName: PackageName, sku: ProductID, purchaseToken: PurchaseToken, purchaseData: String?, signature: String?) {
            self.packageName = packageName
            self.sku = sku
            self.purchaseToken = purchaseToken
            self.purchaseData = purchaseData
            self.signature = signature
        }
    }

    /// A Google Play purchase as the Play Billing Library gives it to the app: `Purchase.getOriginalJson()` exactly as
    /// signed (`purchaseData`) and `Purchase.getSignature()`, besides the package, product id and token it names.
    public struct GooglePlayPurchase: Codable, Sendable, Hashable {
        public var packageName: PackageName
        public var productId: ProductID
        public var purchaseToken: PurchaseToken
        public var purchaseData: String
        public var signature: String
        public init(packageName: PackageName, productId: ProductID, purchaseToken: PurchaseToken, purchaseData: String, signature: String) {
            self.packageName = packageName
            self.productId = productId
            self.purchaseToken = purchaseToken
            self.purchaseData = purchaseData
            self.signature = signature
        }
    }

    /// A web purchase paid through Stripe Checkout: the Checkout Session the app's backend created (with the user's id as
    /// its `client_reference_id`), which the verifier reads back from Stripe's API.
    public struct StripeCheckout: Codable, Sendable, Hashable {
        public var checkoutSessionId: String
        public init(checkoutSessionId: String) { self.checkoutSessionId = checkoutSessionId }
    }

    public var store: Store
    public var kind: SubmissionKind
    public var signedTransaction: String?
    public var receipt: String?
    public var appcoins: AppCoinsPurchase?
    public var googleplay: GooglePlayPurchase?
    public var stripe: StripeCheckout?
    public var userId: UserID
    public var submittedAt: Date
    public var source: SubmissionSource
    public var submissionId: String?
    /// The submitting user's app account token (the UUID the app passed to StoreKit), where the app uses them: a
    /// transaction that carries another token is refused (`appAccountTokenMismatch`).
    public var appAccountToken: AccountToken?

    public init(store: Store, kind: SubmissionKind, signedTransaction: String? = nil, receipt: String? = nil,
                appcoins: AppCoinsPurchase? = nil, googleplay: GooglePlayPurchase? = nil, stripe: StripeCheckout? = nil, userId: UserID, submittedAt: Date,
                source: SubmissionSource, submissionId: String? = nil, appAccountToken: AccountToken? = nil) {
        self.stripe = stripe
        self.appAccountToken = appAccountToken
        self.store = store
        self.kind = kind
        self.signedTransaction = signedTransaction
        self.receipt = receipt
        self.appcoins = appcoins
        self.googleplay = googleplay
        self.userId = userId
        self.submittedAt = submittedAt
        self.source = source
        self.submissionId = submissionId
    }

    public var messageKey: Data? { Data(userId.rawValue.utf8) }
    /// Producers may set `submissionId`; otherwise the id is derived from the content, so that the same
    /// submission produced twice carries the same id.
    public var eventID: String {
        if let submissionId { return "submitted:\(submissionId)" }
        // AppCoins and Google Play: the signature too, so that a corrected resubmission is not taken for the badly signed one.
        let payload = signedTransaction ?? receipt ?? appcoins.map { "\($0.packageName)/\($0.sku)/\($0.purchaseToken)/\($0.signature ?? "")" }
            ?? googleplay.map { "\($0.packageName)/\($0.productId)/\($0.purchaseToken)/\($0.signature)" } ?? stripe?.checkoutSessionId ?? ""
        return "submitted:\(store.rawValue):\(userId):\(ContentHash.hex(payload))"
    }
}

/// `purchase.consumed`: the app reports that it called `finish()` (AppCoins consumes on the device).
public struct PurchaseConsumed: PipelineEvent, Hashable {
    public static let type = EventType.purchaseConsumed
    public var store: Store
    public var transactionId: TransactionID
    public var userId: UserID
    public var consumedAt: Date

    public init(store: Store, transactionId: TransactionID, userId: UserID, consumedAt: Date) {
        self.store = store
        self.transactionId = transactionId
        self.userId = userId
        self.consumedAt = consumedAt
    }

    public var messageKey: Data? { Data(userId.rawValue.utf8) }
    public var eventID: String { "consumed:\(store.rawValue):\(transactionId)" }
}

/// `purchase.verified`: the store proved the payment.
public struct PurchaseVerifiedEvent: PipelineEvent, Hashable {
    public static let type = EventType.purchaseVerified
    public var store: Store
    public var transactionId: TransactionID
    public var originalTransactionId: TransactionID?
    public var productId: ProductID
    public var productType: String?
    public var quantity: Int
    public var userId: UserID
    public var purchaseDate: Date?
    public var expiresDate: Date?
    public var revocationDate: Date?
    public var environment: String?
    public var appAccountToken: AccountToken?
    public var price: Int64?
    public var currency: String?
    public var consumed: Bool?
    public var source: SubmissionSource
    public var verifiedAt: Date
    /// The deployment's app it was bought in; nil: the primary app (`AppDirectory`).
    public var app: AppID?

    public init(store: Store, transactionId: TransactionID, originalTransactionId: TransactionID? = nil, productId: ProductID, productType: String? = nil,
                quantity: Int, userId: UserID, purchaseDate: Date? = nil, expiresDate: Date? = nil, revocationDate: Date? = nil,
                environment: String? = nil, appAccountToken: AccountToken? = nil, price: Int64? = nil, currency: String? = nil,
                consumed: Bool? = nil, source: SubmissionSource, verifiedAt: Date, app: AppID? = nil) {
        self.app = app
        self.store = store
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.productType = productType
        self.quantity = quantity
        self.userId = userId
        self.purchaseDate = purchaseDate
        self.expiresDate = expiresDate
        self.revocationDate = revocationDate
        self.environment = environment
        self.appAccountToken = appAccountToken
        self.price = price
        self.currency = currency
        self.consumed = consumed
        self.source = source
        self.verifiedAt = verifiedAt
    }

    public var messageKey: Data? { Data(userId.rawValue.utf8) }
    public var eventID: String { "verified:\(store.rawValue):\(transactionId)" }
}

/// `purchase.rejected`: not accepted, with the reason and whether a retry may help.
public struct PurchaseRejectedEvent: PipelineEvent, Hashable {
    public static let type = EventType.purchaseRejected
    public var store: Store
    public var transactionId: TransactionID?
    public var productId: ProductID?
    public var userId: UserID
    public var reason: String
    public var retryable: Bool
    public var detail: String?
    public var submissionId: String?
    public var rejectedAt: Date
    /// The `ce_id` of the event rejected: it shapes this event's id, and is encoded so that a decoded rejection keeps it.
    public var causeID: String = ""

    enum CodingKeys: String, CodingKey {
        case store, transactionId, productId, userId, reason, retryable, detail, submissionId, rejectedAt
        case causeID = "causeId"
    }

    public init(store: Store, transactionId: TransactionID? = nil, productId: ProductID? = nil, userId: UserID, reason: String, retryable: Bool,
                detail: String? = nil, submissionId: String? = nil, rejectedAt: Date, causeID: String) {
        self.store = store
        self.transactionId = transactionId
        self.productId = productId
        self.userId = userId
        self.reason = reason
        self.retryable = retryable
        self.detail = detail
        self.submissionId = submissionId
        self.rejectedAt = rejectedAt
        self.causeID = causeID
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        store = try container.decode(Store.self, forKey: .store)
        transactionId = try container.decodeIfPresent(TransactionID.self, forKey: .transactionId)
        productId = try container.decodeIfPresent(ProductID.self, forKey: .productId)
        userId = try container.decode(UserID.self, forKey: .userId)
        reason = try container.decode(String.self, forKey: .reason)
        retryable = try container.decode(Bool.self, forKey: .retryable)
        detail = try container.decodeIfPresent(String.self, forKey: .detail)
        submissionId = try container.decodeIfPresent(String.self, forKey: .submissionId)
        rejectedAt = try container.decode(Date.self, forKey: .rejectedAt)
        // Rejections written before the cause was encoded keep an id of their content.
        causeID = try container.decodeIfPresent(String.self, forKey: .causeID)
            ?? "\(store.rawValue):\(transactionId?.rawValue ?? submissionId ?? userId.rawValue):\(reason)"
    }

    public var messageKey: Data? { Data(userId.rawValue.utf8) }
    public var eventID: String { "rejected:\(causeID)" }
}

/// One item of a grant, as `item.granted` reports it.
public struct GrantedItem: Codable, Sendable, Hashable {
    public enum Kind: String, Codable, Sendable { case currency, entitlement }
    public var kind: Kind
    public var code: ItemCode
    public var amount: Int64?
    public var expiresAt: Date?
    /// Currency items: the user's balance of the currency once this event applied (so a backend mirroring events
    /// need not ask). An entitlement's `expiresAt` is what this purchase gives: the user holds the entitlement until the
    /// latest expiry of the purchases that give it (`GET /v1/users/{userId}`).
    public var balance: Int64?

    public init(kind: Kind, code: ItemCode, amount: Int64? = nil, expiresAt: Date? = nil, balance: Int64? = nil) {
        self.kind = kind
        self.code = code
        self.amount = amount
        self.expiresAt = expiresAt
        self.balance = balance
    }
}

/// `item.granted`: what a purchase granted, or `alreadyGranted` for a repeat that changed nothing (or, for a subscription
/// period signed again with a later expiry, `ce_id` `extended:…`, that moved its expiry; or, for one an upgrade ended
/// early, `ce_id` `ended:…`, that moved it to the upgrade's start).
public struct ItemGranted: PipelineEvent, Hashable {
    public static let type = EventType.itemGranted
    public var store: Store
    public var transactionId: TransactionID
    public var userId: UserID
    public var productId: ProductID
    /// The domain's product type (`consumable`, `nonConsumable`, `autoRenewable`, `nonRenewing`).
    public var productType: String?
    /// Units of the product bought: within `quantities`, the schema's bounds.
    public var quantity: Int
    public var items: [GrantedItem]
    public var alreadyGranted: Bool
    /// Granted again after the store reversed its refund (REFUND_REVERSED).
    public var reinstated: Bool?
    /// A restore under another user id moved the entitlement from this user (restore policy `transfer`).
    public var transferredFrom: UserID?
    public var ledgerEntryId: Int64?
    public var grantedAt: Date
    /// A repeat that moved the period's expiry (RENEWAL_EXTENDED) to this date. Not in the body (its items carry the new
    /// expiry, and the schema stays as readers know it): in `ce_id`, so that consumers that dedupe by it take the
    /// extension for an event of its own, not for the first grant again. Never decoded: a consumer tells an extension by
    /// its `ce_id` (`extended:…`), and a decoded event has nil here.
    public var extendedUntil: Date?
    /// A repeat that tells the holder of this subscription period that an upgrade (a period of another product of the
    /// subscription) ended it at this date, its start: its items end then. Like `extendedUntil`, only in `ce_id`
    /// (`ended:…`), and nil in a decoded event.
    public var endedAt: Date?
    /// The deployment's app it was bought in; nil: the primary app (`AppDirectory`).
    public var app: AppID?

    enum CodingKeys: String, CodingKey {
        case store, app, transactionId, userId, productId, productType, quantity, items, alreadyGranted, reinstated, transferredFrom, ledgerEntryId, grantedAt
    }

    /// The quantities the schema (`item.granted.v1`) takes: a grant of any other is refused before it is written.
    public static let quantities: ClosedRange<Int> = CurrencyAmounts.quantities

    public init(store: Store, transactionId: TransactionID, userId: UserID, productId: ProductID, productType: String? = nil, quantity: Int,
                items: [GrantedItem], alreadyGranted: Bool, reinstated: Bool? = nil, transferredFrom: UserID? = nil, ledgerEntryId: Int64? = nil,
                grantedAt: Date, extendedUntil: Date? = nil, endedAt: Date? = nil, app: AppID? = nil) {
        self.app = app
        self.extendedUntil = extendedUntil
        self.endedAt = endedAt
        self.transferredFrom = transferredFrom
        self.productType = productType
        self.reinstated = reinstated
        self.store = store
        self.transactionId = transactionId
        self.userId = userId
        self.productId = productId
        self.quantity = quantity
        self.items = items
        self.alreadyGranted = alreadyGranted
        self.ledgerEntryId = ledgerEntryId
        self.grantedAt = grantedAt
    }

    public var messageKey: Data? { Data(userId.rawValue.utf8) }
    /// A re-grant is an event of its own: consumers that dedupe by `ce_id` must not take it for the first grant.
    public var eventID: String {
        if transferredFrom != nil { return "transferred:\(store.rawValue):\(transactionId):\(userId)" }
        func expiryMoved(_ kind: String, _ date: Date) -> String { "\(kind):\(store.rawValue):\(transactionId):\(Int64((date.timeIntervalSince1970 * 1000).rounded()))" }
        if let extendedUntil { return expiryMoved("extended", extendedUntil) }
        if let endedAt { return expiryMoved("ended", endedAt) }
        return "\(reinstated == true ? "regranted" : "granted"):\(store.rawValue):\(transactionId)"
    }
}

/// `transaction.finished`: completed with the store; the app may call `finish()`.
public struct TransactionFinished: PipelineEvent, Hashable {
    public static let type = EventType.transactionFinished
    /// How it was completed. `entitlementGranted`: a non-consumable or subscription, complete at its grant (no store
    /// call to make: the app finishes it when it sees the grant).
    public typealias Method = FinishMethod
    public var store: Store
    public var transactionId: TransactionID
    public var userId: UserID
    public var method: Method
    public var finishedAt: Date

    public init(store: Store, transactionId: TransactionID, userId: UserID, method: Method, finishedAt: Date) {
        self.store = store
        self.transactionId = transactionId
        self.userId = userId
        self.method = method
        self.finishedAt = finishedAt
    }

    public var messageKey: Data? { Data(userId.rawValue.utf8) }
    public var eventID: String { "finished:\(store.rawValue):\(transactionId)" }
}

/// `refund.due`: paid, not completed by the deadline; the store refunds it.
public struct RefundDue: PipelineEvent, Hashable {
    public static let type = EventType.refundDue
    public var store: Store
    public var transactionId: TransactionID
    /// Nil for a charge the store announced that no user claimed (`unclaimed`).
    public var userId: UserID?
    public var productId: ProductID
    public var state: String?
    public var purchaseDate: Date
    public var deadline: Date
    public var flaggedAt: Date
    /// True when nobody claimed the charge: the user paid and received nothing.
    public var unclaimed: Bool?
    /// What the pipeline did about the money where it refunds itself (Google Play, with claw-back on); absent: the operator
    /// refunds, or the store does.
    public var storeRefund: StoreRefund?

    /// The refund of a due purchase through the store's API.
    public enum StoreRefund: String, Sendable, Hashable, Codable {
        /// Refunded now (Google Play `orders.refund`, the item revoked).
        case refunded
        /// The store reports it refunded or canceled already (Google refunds what is not acknowledged in three days).
        case alreadyRefunded
        /// The store refused the refund, or could not be asked about this purchase: refund it by hand.
        case refused
    }

    public init(store: Store, transactionId: TransactionID, userId: UserID?, productId: ProductID, state: String?, purchaseDate: Date,
                deadline: Date, flaggedAt: Date, storeRefund: StoreRefund? = nil) {
        self.storeRefund = storeRefund
        self.store = store
        self.transactionId = transactionId
        self.userId = userId
        self.productId = productId
        self.state = state
        self.purchaseDate = purchaseDate
        self.deadline = deadline
        self.flaggedAt = flaggedAt
        self.unclaimed = userId == nil ? true : nil
    }

    /// The user's key; an unclaimed charge's is its transaction's.
    public var messageKey: Data? { Data((userId?.rawValue ?? "unclaimed:\(store.rawValue):\(transactionId)").utf8) }
    public var eventID: String { "refunddue:\(store.rawValue):\(transactionId)" }
}

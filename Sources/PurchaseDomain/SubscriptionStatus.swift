import Foundation

/// What a backend needs to message the user of an auto-renewable subscription, as the store last said it: whether it
/// renews, to which product, a billing issue and its grace period, a pause, a price increase, why it expired, the offer
/// in force.
/// `asOf` is when the store signed that information: only newer information replaces it (`SubscriptionStatus.update`).
///
/// The store's codes (price increase, expiration, offer type) are kept as sent (`raw…`), so that a value a later store
/// version adds is carried, not lost; the typed views name the values known.
public struct SubscriptionStatus: Sendable, Hashable, Codable {
    public var store: Store
    public var originalTransactionId: TransactionID
    /// The product the current period is of.
    public var productId: ProductID?
    /// Whether it renews at the end of the period (App Store `autoRenewStatus`); nil when the store did not say.
    public var willRenew: Bool?
    /// The product it renews to when that is not `productId`: a downgrade or crossgrade waiting for the renewal.
    public var pendingProductId: ProductID?
    /// Since when renewing fails on billing (App Store billing retry): when the store first said so; nil without an issue.
    public var billingIssueSince: Date?
    /// When the billing grace period ends: service continues until then while renewing fails.
    public var gracePeriodEndsAt: Date?
    /// Paused by the customer (Google Play): until when, when the store says it resumes; nil while not paused.
    public var pausedUntil: Date?
    /// App Store `priceIncreaseStatus`: 0 the customer has not responded to a price increase, 1 consented (or needed not).
    public var rawPriceIncreaseStatus: Int64?
    /// App Store `expirationIntent` (1 cancelled, 2 billing error, 3 price increase declined, 4 product not for sale, 5 other).
    public var rawExpirationReason: Int64?
    /// App Store `offerType` (1 introductory, 2 promotional, 3 offer code, 4 win-back).
    public var rawOfferType: Int64?
    /// The offer's identifier (promotional offer, offer code, win-back offer); an introductory offer has none.
    public var offerIdentifier: String?
    /// When the store signed this information.
    public var asOf: Date

    public init(store: Store, originalTransactionId: TransactionID, productId: ProductID? = nil, willRenew: Bool? = nil,
                pendingProductId: ProductID? = nil, billingIssueSince: Date? = nil, gracePeriodEndsAt: Date? = nil, pausedUntil: Date? = nil,
                rawPriceIncreaseStatus: Int64? = nil, rawExpirationReason: Int64? = nil, rawOfferType: Int64? = nil,
                offerIdentifier: String? = nil, asOf: Date) {
        self.store = store
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.willRenew = willRenew
        self.pendingProductId = pendingProductId
        self.billingIssueSince = billingIssueSince
        self.gracePeriodEndsAt = gracePeriodEndsAt
        self.pausedUntil = pausedUntil
        self.rawPriceIncreaseStatus = rawPriceIncreaseStatus
        self.rawExpirationReason = rawExpirationReason
        self.rawOfferType = rawOfferType
        self.offerIdentifier = offerIdentifier
        self.asOf = asOf
    }

    /// The store's codes under the names events and the read side give them.
    enum CodingKeys: String, CodingKey {
        case store, originalTransactionId, productId, willRenew, pendingProductId, billingIssueSince, gracePeriodEndsAt, pausedUntil, offerIdentifier, asOf
        case rawPriceIncreaseStatus = "priceIncreaseStatus", rawExpirationReason = "expirationReason", rawOfferType = "offerType"
    }

    /// The read side's order: by store, then by original transaction id (its bytes).
    public static func inReadOrder(_ left: SubscriptionStatus, _ right: SubscriptionStatus) -> Bool {
        (left.store.rawValue, left.originalTransactionId) < (right.store.rawValue, right.originalTransactionId)
    }

    /// The subscription it describes: its store and original transaction (a `PurchaseKey` of the original).
    public var subscription: PurchaseKey { PurchaseKey(store: store, transactionId: originalTransactionId) }

    /// The price increase's status, when the store sent a known one.
    public var priceIncreaseStatus: PriceIncreaseStatus? { rawPriceIncreaseStatus.flatMap(PriceIncreaseStatus.init(rawValue:)) }
    /// Why it expired, when the store sent a known reason.
    public var expirationReason: ExpirationReason? { rawExpirationReason.flatMap(ExpirationReason.init(rawValue:)) }
    /// The offer's type, when the store sent a known one.
    public var offerType: OfferType? { rawOfferType.flatMap(OfferType.init(rawValue:)) }

    /// A customer's answer to a price increase (App Store `priceIncreaseStatus`).
    public enum PriceIncreaseStatus: Int64, Sendable, CaseIterable {
        case notResponded = 0
        /// Consented, or was notified of an increase that needs no consent.
        case consented = 1
    }

    /// Why a subscription expired (App Store `expirationIntent`; the subtypes of `EXPIRED` say the same).
    public enum ExpirationReason: Int64, Sendable, CaseIterable {
        /// The customer cancelled (`VOLUNTARY`).
        case customerCancelled = 1
        /// Billing retry ended without a successful charge (`BILLING_RETRY`).
        case billingError = 2
        /// The customer did not consent to a price increase (`PRICE_INCREASE`).
        case priceIncreaseDeclined = 3
        /// The product was not for sale when it was to renew (`PRODUCT_NOT_FOR_SALE`).
        case productNotAvailable = 4
        case other = 5
    }

    /// The kind of offer in force (App Store `offerType`).
    public enum OfferType: Int64, Sendable, CaseIterable {
        case introductory = 1
        case promotional = 2
        case offerCode = 3
        case winBack = 4
    }

    /// The fields a change is announced by, named as events and the read side name them.
    public enum Field: String, Sendable, Hashable, CaseIterable, Codable {
        case productId, willRenew, pendingProductId, billingIssueSince, gracePeriodEndsAt, pausedUntil, priceIncreaseStatus, expirationReason, offerType, offerIdentifier
    }

    /// The fields in which `self` and `other` differ (times to the millisecond, as they are kept), in `Field` order.
    public func fields(differingFrom other: SubscriptionStatus) -> [Field] {
        func ms(_ date: Date?) -> Int64? { date.map(EpochMilliseconds.milliseconds) }
        return Field.allCases.filter { field in
            switch field {
            case .productId: productId != other.productId
            case .willRenew: willRenew != other.willRenew
            case .pendingProductId: pendingProductId != other.pendingProductId
            case .billingIssueSince: ms(billingIssueSince) != ms(other.billingIssueSince)
            case .gracePeriodEndsAt: ms(gracePeriodEndsAt) != ms(other.gracePeriodEndsAt)
            case .pausedUntil: ms(pausedUntil) != ms(other.pausedUntil)
            case .priceIncreaseStatus: rawPriceIncreaseStatus != other.rawPriceIncreaseStatus
            case .expirationReason: rawExpirationReason != other.rawExpirationReason
            case .offerType: rawOfferType != other.rawOfferType
            case .offerIdentifier: offerIdentifier != other.offerIdentifier
            }
        }
    }

    /// What `received` does to `stored` (nil: nothing is stored for the subscription). Events arrive in any order: only
    /// information signed later than what is stored applies; of two signed at the same millisecond the stored one stands.
    /// The information is the subscription's whole status, with one exception: a billing issue that goes on keeps the
    /// time it was first reported (`billingIssueSince`). The same information again (a redelivery, a notification sent
    /// twice) is a repeat: `announced`, what the stored status's announcement named, is announced again (same event id),
    /// so that an announcement lost between the store's commit and the broker is not lost for good.
    public static func update(_ stored: SubscriptionStatus?, announced: [Field] = [], with received: SubscriptionStatus) -> SubscriptionStatusUpdate {
        guard let stored else {
            let changed = received.fields(differingFrom: SubscriptionStatus(store: received.store, originalTransactionId: received.originalTransactionId,
                                                                            asOf: received.asOf))
            return changed.isEmpty ? .unchanged(received) : .changed(received, fields: changed)
        }
        var next = received
        if let since = stored.billingIssueSince, received.billingIssueSince != nil { next.billingIssueSince = since }
        let changed = next.fields(differingFrom: stored)
        let (receivedAt, storedAt) = (EpochMilliseconds.milliseconds(received.asOf), EpochMilliseconds.milliseconds(stored.asOf))
        if receivedAt == storedAt && changed.isEmpty { return .repeated(stored, fields: announced) }
        guard receivedAt > storedAt else { return .stale }
        return changed.isEmpty ? .unchanged(next) : .changed(next, fields: changed)
    }
}

/// What new information about a subscription does to its stored status (`SubscriptionStatus.update`).
public enum SubscriptionStatusUpdate: Sendable, Hashable {
    /// Newer, and these fields differ: `status` now stands, and the change is announced.
    case changed(SubscriptionStatus, fields: [SubscriptionStatus.Field])
    /// Newer (or the first) but saying what is stored: `status`, with its later `asOf`, now stands; nothing to announce.
    case unchanged(SubscriptionStatus)
    /// What is stored, again (signed at the same time, saying the same): nothing changes; `fields` are what its
    /// announcement named (none: it had none), to announce again.
    case repeated(SubscriptionStatus, fields: [SubscriptionStatus.Field])
    /// Signed no later than what is stored, and not the same: nothing changes.
    case stale

    /// The status to keep, when there is one.
    public var standing: SubscriptionStatus? {
        switch self {
        case .changed(let status, _), .unchanged(let status): status
        case .repeated, .stale: nil
        }
    }

    /// What is to be announced (`subscription.status`): a change, or the repeat of one.
    public var announcement: (status: SubscriptionStatus, fields: [SubscriptionStatus.Field])? {
        switch self {
        case .changed(let status, let fields): (status, fields)
        case .repeated(let status, let fields) where !fields.isEmpty: (status, fields)
        default: nil
        }
    }

    /// The fields an announcement of the status this update keeps names: recorded with it (`repeated`).
    public var announcedFields: [SubscriptionStatus.Field] {
        if case .changed(_, let fields) = self { fields } else { [] }
    }
}

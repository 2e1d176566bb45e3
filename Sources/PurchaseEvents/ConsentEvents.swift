import Foundation
import PurchaseDomain

/// `user.consent`: a user's answer to sharing their consumption data with the store (App Store *Send Consumption
/// Information* requires it: `customerConsented`). Sent by the app's backend when the user answers or changes
/// their mind; the latest `decidedAt` stands, `false` withdraws. Without a recorded `true`, nothing is shared.
public struct UserConsent: PipelineEvent, Hashable {
    public static let type = EventType.userConsent
    public var userId: UserID
    /// Consent to share consumption data with the store when a refund is requested.
    public var consumptionData: Bool
    public var decidedAt: Date

    public init(userId: UserID, consumptionData: Bool, decidedAt: Date) {
        self.userId = userId
        self.consumptionData = consumptionData
        self.decidedAt = decidedAt
    }

    public var messageKey: Data? { Data(userId.rawValue.utf8) }
    public var eventID: String { "consent:\(userId):\(Int64((decidedAt.timeIntervalSince1970 * 1000).rounded())):\(consumptionData ? "yes" : "no")" }
}

/// `consumption.requested`: the store asks what the customer received of a purchase whose refund they requested
/// (App Store `CONSUMPTION_REQUEST`). Written by the verifier once the notification is verified; the finisher
/// answers it within `answerBy`, with the user's consent only.
public struct ConsumptionRequested: PipelineEvent, Hashable {
    public static let type = EventType.consumptionRequested
    public var store: Store
    public var transactionId: TransactionID
    public var originalTransactionId: TransactionID?
    /// The user the purchase was recorded for, when the pipeline has seen it.
    public var userId: UserID?
    public var productId: ProductID?
    /// The store's `consumptionRequestReason` (e.g. `UNINTENDED_PURCHASE`, `FULFILLMENT_ISSUE`), as sent.
    public var requestReason: String?
    /// The transaction's `inAppOwnershipType` (`PURCHASED`, `FAMILY_SHARED`).
    public var ownershipType: String?
    public var notificationUUID: String
    public var requestedAt: Date
    /// The store's deadline for an answer (App Store: 12 hours after the notification was signed).
    public var answerBy: Date

    public init(store: Store, transactionId: TransactionID, originalTransactionId: TransactionID? = nil, userId: UserID? = nil, productId: ProductID? = nil,
                requestReason: String? = nil, ownershipType: String? = nil, notificationUUID: String, requestedAt: Date, answerBy: Date) {
        self.store = store
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.userId = userId
        self.productId = productId
        self.requestReason = requestReason
        self.ownershipType = ownershipType
        self.notificationUUID = notificationUUID
        self.requestedAt = requestedAt
        self.answerBy = answerBy
    }

    /// Keyed by transaction, so that the store's retries of a request (before and after the purchase is recorded)
    /// meet on one partition.
    public var messageKey: Data? { Data("store:\(store.rawValue):\(transactionId)".utf8) }
    public var eventID: String { "consumptionRequested:\(store.rawValue):\(transactionId):\(notificationUUID)" }
}

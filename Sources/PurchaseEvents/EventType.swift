/// Every kind of message on the pipeline's topics: its topic, CloudEvents type and schema.
public enum EventType: String, Sendable, CaseIterable {
    case purchaseSubmitted = "purchase.submitted"
    case storeNotification = "store.notification"
    case purchaseConsumed = "purchase.consumed"
    case purchaseVerified = "purchase.verified"
    case purchaseRejected = "purchase.rejected"
    case itemGranted = "item.granted"
    case transactionFinished = "transaction.finished"
    case refundDue = "refund.due"
    case purchaseRevoked = "purchase.revoked"
    case userConsent = "user.consent"
    case consumptionRequested = "consumption.requested"
    case subscriptionStatus = "subscription.status"
    case userToken = "user.token"
    case userAdjustment = "user.adjustment"
    case userAdjusted = "user.adjusted"
    case deadLetter = "deadletter"

    /// The default topic name (`iap.` + type); deployments may prefix all topics.
    public var topic: String { "iap.\(rawValue)" }
    /// The CloudEvents `type` attribute.
    public var ceType: String { "iap.\(rawValue).v1" }
    /// The schema `$id`, also the CloudEvents `dataschema`.
    public var schemaID: String { "urn:iap-pipeline:schema:\(rawValue):v1" }

    public init?(ceType: String) {
        guard ceType.hasPrefix("iap."), ceType.hasSuffix(".v1") else { return nil }
        self.init(rawValue: String(ceType.dropFirst(4).dropLast(3)))
    }
}

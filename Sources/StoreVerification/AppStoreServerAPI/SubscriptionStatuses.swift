import Foundation
import JSON
import PurchaseDomain

/// The status of an auto-renewable subscription, as *Get All Subscription Statuses* numbers it.
public enum AppStoreSubscriptionStatus: Int, Sendable, CaseIterable {
    /// The subscription is active.
    case active = 1
    /// The subscription expired.
    case expired = 2
    /// The subscription is in its billing retry period.
    case billingRetry = 3
    /// The subscription is in its Billing Grace Period.
    case gracePeriod = 4
    /// The App Store revoked the subscription (a refund, or Family Sharing ended).
    case revoked = 5
}

/// One auto-renewable subscription of the customer (a `lastTransactionsItem`), with the group it belongs to.
public struct SubscriptionStatusEntry: Sendable, Equatable {
    /// The subscription group the subscription belongs to.
    public var subscriptionGroupIdentifier: String
    /// The subscription's original transaction id.
    public var originalTransactionId: TransactionID
    /// `status` as the App Store sent it, kept even when it is none of `AppStoreSubscriptionStatus`'s cases.
    public var rawStatus: Int
    /// The subscription's latest transaction (a `JWSTransaction`), not yet verified: verify it with
    /// `SignedDataVerifier.verifyTransaction`.
    public var signedTransactionInfo: String
    /// The subscription's renewal information (a `JWSRenewalInfo`), not yet verified: verify it with
    /// `SignedDataVerifier.verifyRenewalInfo`.
    public var signedRenewalInfo: String

    /// `rawStatus` as a case; nil for a status Apple added that this type does not know yet.
    public var status: AppStoreSubscriptionStatus? { AppStoreSubscriptionStatus(rawValue: rawStatus) }

    public init(subscriptionGroupIdentifier: String, originalTransactionId: TransactionID, rawStatus: Int,
                signedTransactionInfo: String, signedRenewalInfo: String) {
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.originalTransactionId = originalTransactionId
        self.rawStatus = rawStatus
        self.signedTransactionInfo = signedTransactionInfo
        self.signedRenewalInfo = signedRenewalInfo
    }
}

extension AppStoreServerAPIClient {
    /// `GET /inApps/v1/subscriptions/{transactionId}` (*Get All Subscription Statuses*): the status of every
    /// auto-renewable subscription of the customer who made `id` in this app, group by group as the App Store lists them.
    public func subscriptionStatuses(of id: TransactionID) async -> Result<[SubscriptionStatusEntry], Failure> {
        await get(for: id) { "inApps/v1/subscriptions/\($0)" }.flatMap { answer in
            guard let groups = JSONValue.parse(answer)?.objectValue?["data"]?.arrayValue else {
                return .failure(.unavailable("App Store Server API: subscription statuses that are not a StatusResponse (no data)"))
            }
            var entries: [SubscriptionStatusEntry] = []
            for group in groups {
                guard let fields = group.objectValue, let identifier = fields["subscriptionGroupIdentifier"]?.stringValue,
                      let items = fields["lastTransactions"]?.arrayValue else {
                    return .failure(.unavailable("App Store Server API: a StatusResponse group that is not a SubscriptionGroupIdentifierItem"))
                }
                for item in items {
                    guard let entry = Self.entry(item, group: identifier) else {
                        return .failure(.unavailable("App Store Server API: a StatusResponse subscription that is not a lastTransactionsItem"))
                    }
                    entries.append(entry)
                }
            }
            return .success(entries)
        }
    }

    /// A `lastTransactionsItem` of `group`, or nil when a field is missing or of another type.
    private static func entry(_ item: JSONValue, group: String) -> SubscriptionStatusEntry? {
        guard let fields = item.objectValue, let original = fields["originalTransactionId"]?.stringValue, !original.isEmpty,
              let status = fields["status"]?.int64Value, let rawStatus = Int(exactly: status),
              let transaction = fields["signedTransactionInfo"]?.stringValue,
              let renewal = fields["signedRenewalInfo"]?.stringValue else { return nil }
        return SubscriptionStatusEntry(subscriptionGroupIdentifier: group, originalTransactionId: TransactionID(original), rawStatus: rawStatus,
                                       signedTransactionInfo: transaction, signedRenewalInfo: renewal)
    }
}

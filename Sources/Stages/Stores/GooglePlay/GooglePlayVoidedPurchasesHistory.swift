import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// Google Play's voided purchases of one app (refunded, canceled, charged back; one-time products and subscription orders;
/// Google keeps 30 days): each one a revocation on `purchase.revoked` (of the refunded units only, for a quantity-based
/// partial refund), which the granter carries out (a tombstone when the purchase was never seen) whether
/// or not a notification told of it. What was published is recorded, so that the next pass's overlap publishes it no more.
public struct GooglePlayVoidedPurchasesHistory: StoreHistory {
    public var packageName: PackageName
    public var api: AndroidPublisherClient

    public init(packageName: PackageName, api: AndroidPublisherClient) {
        self.packageName = packageName
        self.api = api
    }

    /// The revocation of an order Google voided, under the id it is recorded as published by: the voided list and a
    /// voided-purchase notification name it alike, so that whichever comes second publishes it no more. Keyed by the order
    /// id, as Google recommends (a subscription's renewals share its purchase token). `refundedQuantity`: a quantity-based
    /// partial refund's units.
    public static func revocation(packageName: PackageName, transactionId: TransactionID, voidedAt: Date?, refundedQuantity: Int? = nil,
                                  at now: Date) -> StoreHistoryPage.Entry {
        StoreHistoryPage.Entry(id: NotificationID("googleplay.voided:\(packageName):\(transactionId)"), event: PurchaseRevokedEvent(
            store: .googleplay, transactionId: transactionId, reason: .REFUND, revocationDate: voidedAt, refundedQuantity: refundedQuantity,
            decidedAt: voidedAt, revokedAt: now))
    }

    public var name: String { "googleplay:\(packageName)" }
    public var checkpoint: String { "googleplay.voided.\(packageName)" }
    public var kept: TimeInterval { AndroidPublisherClient.voidedPurchasesKept }
    public var recordsPublished: Bool { true }

    public func page(from start: Date, to end: Date, token: String?, readAt: Date) async -> Result<StoreHistoryPage, StoreHistoryFailure> {
        switch await api.voidedPurchases(packageName: packageName, from: start, to: end, pageToken: token) {
        case .success(let page):
            let entries = page.purchases.map { voided in
                // Units beyond any quantity a purchase can have are the whole of it.
                let units = voided.voidedQuantity.flatMap { CurrencyAmounts.quantities.contains(Int(clamping: $0)) ? Int($0) : nil }
                return Self.revocation(packageName: packageName, transactionId: voided.transactionId, voidedAt: voided.voidedTime, refundedQuantity: units,
                                       at: readAt)
            }
            return .success(.init(entries: entries, nextToken: page.nextPageToken))
        case .failure(.unavailable(let why, let retryAfter)): return .failure(.unavailable(why, retryAfter: retryAfter))
        case .failure(.refused(let status, let detail)): return .failure(.refused("voided purchases: HTTP \(status) \(detail)"))
        }
    }
}

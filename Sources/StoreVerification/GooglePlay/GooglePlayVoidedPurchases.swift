import Foundation
import JSON
import PurchaseDomain

/// A purchase Google voided (canceled, refunded or charged back), as `purchases.voidedpurchases.list` reports it.
public struct GooglePlayVoidedPurchase: Sendable, Hashable {
    public var purchaseToken: PurchaseToken
    /// Google's order id; absent for some test purchases.
    public var orderId: TransactionID?
    public var purchaseTime: Date?
    public var voidedTime: Date?
    /// 0 the user, 1 the developer, 2 Google.
    public var voidedSource: Int64?
    /// 0 other, 1 remorse, 2 not received, 3 defective, 4 accidental purchase, 5 fraud, 6 friendly fraud, 7 chargeback, …
    public var voidedReason: Int64?
    /// A quantity-based partial refund's count of units; absent: the whole purchase.
    public var voidedQuantity: Int64?
    public var raw: [String: JSONValue]

    /// The id the purchase's effects are keyed by, as `GooglePlayProductPurchase.transactionId`.
    public var transactionId: TransactionID { orderId ?? TransactionID(purchaseToken) }

    init?(_ fields: [String: JSONValue]) {
        let json = JSONFields(object: fields)
        guard let token: PurchaseToken = json.identifier("purchaseToken") else { return nil }
        purchaseToken = token
        orderId = json.string("orderId").flatMap { $0.isEmpty ? nil : TransactionID($0) }
        purchaseTime = json.int64("purchaseTimeMillis").flatMap(EpochMilliseconds.date)
        voidedTime = json.int64("voidedTimeMillis").flatMap(EpochMilliseconds.date)
        voidedSource = json.int64("voidedSource")
        voidedReason = json.int64("voidedReason")
        voidedQuantity = json.int64("voidedQuantity").flatMap { $0 > 0 ? $0 : nil }
        raw = fields
    }
}

/// One page of voided purchases, and the token of the next (nil: the last).
public struct GooglePlayVoidedPurchasesPage: Sendable, Hashable {
    public var purchases: [GooglePlayVoidedPurchase]
    public var nextPageToken: String?
}

extension AndroidPublisherClient {
    /// Google lists purchases voided in the last 30 days.
    public static let voidedPurchasesKept: TimeInterval = 30 * 86_400

    /// `purchases.voidedpurchases.list`: purchases of `packageName` Google voided between `start` and `end` (the times
    /// Google recorded them voided), a page at a time; with a `pageToken`, the page it names (the times are then ignored
    /// by Google). `type=1` asks for subscription orders too (Google's default, 0, lists one-time products only), and
    /// `includeQuantityBasedPartialRefund=true` for partial refunds of multi-quantity purchases, with their `voidedQuantity`
    /// (left out by default).
    public func voidedPurchases(packageName: PackageName, from start: Date, to end: Date, pageToken: String? = nil,
                                maxResults: Int = 1000) async -> Result<GooglePlayVoidedPurchasesPage, Failure> {
        let package: String
        switch Self.pathSegments([("package", packageName.rawValue)]) {
        case .success(let encoded): package = encoded[0]
        case .failure(let failure): return .failure(failure)
        }
        var url = applicationsURL + package + "/purchases/voidedpurchases?startTime=\(EpochMilliseconds.milliseconds(start))"
            + "&endTime=\(EpochMilliseconds.milliseconds(end))&maxResults=\(maxResults)&type=1&includeQuantityBasedPartialRefund=true"
        if let pageToken {
            guard let token = Self.pathSegment(pageToken) else { return .failure(.refused(status: 0, detail: "a page token that cannot be percent-encoded")) }
            url += "&token=" + token
        }
        return await send("GET", url: url).flatMap { body in
            guard let fields = JSONValue.parse(body)?.objectValue else {
                return .failure(.unavailable("Android Publisher API: an answer that is not a VoidedPurchasesListResponse"))
            }
            let listed = fields["voidedPurchases"]?.arrayValue ?? []
            let purchases = listed.compactMap { $0.objectValue.flatMap(GooglePlayVoidedPurchase.init) }
            guard purchases.count == listed.count else {
                return .failure(.unavailable("Android Publisher API: a voided purchase without its purchaseToken"))
            }
            let next = fields["tokenPagination"]?.objectValue?["nextPageToken"]?.stringValue
            return .success(.init(purchases: purchases, nextPageToken: next.flatMap { $0.isEmpty ? nil : $0 }))
        }
    }
}

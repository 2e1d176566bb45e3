import Foundation
import JSON
import PurchaseDomain

/// A purchase of a one-time product as the Android Publisher API reports it (`purchases.products.get`, a
/// `ProductPurchase`): the typed fields the pipeline decides by, and the whole answer in `raw`.
public struct GooglePlayProductPurchase: Sendable, Hashable {
    public var packageName: PackageName
    public var productId: ProductID
    public var purchaseToken: PurchaseToken
    /// Google's order id (`GPA.…`); absent for some test purchases.
    public var orderId: TransactionID?
    public var purchaseTime: Date?
    /// 0 purchased, 1 canceled, 2 pending.
    public var purchaseState: Int64
    /// 0 yet to be consumed, 1 consumed.
    public var consumptionState: Int64?
    /// 0 yet to be acknowledged, 1 acknowledged.
    public var acknowledgementState: Int64?
    /// Absent for a real purchase; 0 test (a license tester's, never charged), 1 promo, 2 rewarded.
    public var purchaseType: Int64?
    /// How many units were bought at once (multi-quantity purchases); 1 when the answer leaves it out.
    public var quantity: Int
    /// What the app set as the billing flow's `obfuscatedAccountId`.
    public var obfuscatedExternalAccountId: String?
    public var regionCode: String?
    public var raw: [String: JSONValue]

    public var isConsumed: Bool { consumptionState == 1 }
    public var isAcknowledged: Bool { acknowledgementState == 1 }
    /// The id effects are keyed by: the order id, or the purchase token where the API gives none.
    public var transactionId: TransactionID { orderId ?? TransactionID(purchaseToken) }

    /// The purchase an answer of the API describes; nil without a `purchaseState`.
    init?(answer fields: [String: JSONValue], packageName: PackageName, productId: ProductID, purchaseToken: PurchaseToken) {
        let json = JSONFields(object: fields)
        guard let state = json.int64("purchaseState") else { return nil }
        self.packageName = packageName
        self.productId = json.identifier("productId") ?? productId
        self.purchaseToken = json.identifier("purchaseToken") ?? purchaseToken
        orderId = json.string("orderId").flatMap { $0.isEmpty ? nil : TransactionID($0) }
        purchaseTime = json.int64("purchaseTimeMillis").flatMap(EpochMilliseconds.date)
        purchaseState = state
        consumptionState = json.int64("consumptionState")
        acknowledgementState = json.int64("acknowledgementState")
        purchaseType = json.int64("purchaseType")
        quantity = json.int64("quantity").map { Int(clamping: $0) } ?? 1
        obfuscatedExternalAccountId = json.string("obfuscatedExternalAccountId")
        regionCode = json.string("regionCode")
        raw = fields
    }
}

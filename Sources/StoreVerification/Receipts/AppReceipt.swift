import PurchaseDomain
import Foundation
import JSON

/// A decoded StoreKit 1 app receipt (field type numbers from Apple's "Receipt Fields").
public struct AppReceipt: Sendable, Hashable {
    /// Field type 0: where the receipt was issued, e.g. `Production`, `ProductionSandbox`, `Xcode`.
    public var receiptType: String?
    public var bundleId: BundleID?
    public var appVersion: String?
    public var originalAppVersion: String?
    public var creationDate: Date?
    public var expirationDate: Date?
    public var inAppPurchases: [InAppPurchaseReceipt]

    public init(receiptType: String? = nil, bundleId: BundleID? = nil, appVersion: String? = nil, originalAppVersion: String? = nil,
                creationDate: Date? = nil, expirationDate: Date? = nil, inAppPurchases: [InAppPurchaseReceipt] = []) {
        self.receiptType = receiptType
        self.bundleId = bundleId
        self.appVersion = appVersion
        self.originalAppVersion = originalAppVersion
        self.creationDate = creationDate
        self.expirationDate = expirationDate
        self.inAppPurchases = inAppPurchases
    }

    /// The environment the receipt type names: `Production` (and `ProductionVPP`, a volume purchase) is Production,
    /// `ProductionSandbox` (and `ProductionVPPSandbox`) Sandbox, `Xcode` Xcode; nil without a type or with one
    /// this version does not know.
    public var environment: AppStoreEnvironment? {
        switch receiptType {
        case "Production", "ProductionVPP": .production
        case "ProductionSandbox", "ProductionVPPSandbox": .sandbox
        case "Xcode": .xcode
        default: nil
        }
    }
}

/// One in-app purchase in an app receipt.
public struct InAppPurchaseReceipt: Sendable, Hashable {
    public var quantity: Int64?
    public var productId: ProductID?
    public var transactionId: TransactionID?
    public var originalTransactionId: TransactionID?
    public var purchaseDate: Date?
    public var originalPurchaseDate: Date?
    public var expiresDate: Date?
    public var cancellationDate: Date?
    public var webOrderLineItemId: Int64?

    public init(quantity: Int64? = nil, productId: ProductID? = nil, transactionId: TransactionID? = nil, originalTransactionId: TransactionID? = nil,
                purchaseDate: Date? = nil, originalPurchaseDate: Date? = nil, expiresDate: Date? = nil,
                cancellationDate: Date? = nil, webOrderLineItemId: Int64? = nil) {
        self.quantity = quantity
        self.productId = productId
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.purchaseDate = purchaseDate
        self.originalPurchaseDate = originalPurchaseDate
        self.expiresDate = expiresDate
        self.cancellationDate = cancellationDate
        self.webOrderLineItemId = webOrderLineItemId
    }
}

/// Parses the receipt payload: a SET of attributes `SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }`.
enum AppReceiptParser {
    /// Upper bounds that keep a hostile receipt from costing unbounded time or memory.
    static let maxPayloadBytes = 8 * 1024 * 1024
    static let maxAttributes = 200_000

    static func parse(_ payload: Data) throws -> AppReceipt {
        guard payload.count <= maxPayloadBytes else { throw DERReader.Malformed(description: "payload of \(payload.count) bytes") }
        let budget = AttributeBudget(remaining: maxAttributes)
        var receipt = AppReceipt(inAppPurchases: [])
        try forEachAttribute(in: ArraySlice(payload), budget: budget) { type, value in
            switch type {
            case 0: receipt.receiptType = try string(value)
            case 2: receipt.bundleId = BundleID(try string(value))
            case 3: receipt.appVersion = try string(value)
            case 12: receipt.creationDate = try date(value)
            case 17: receipt.inAppPurchases.append(try inAppPurchase(value, budget: budget))
            case 19: receipt.originalAppVersion = try string(value)
            case 21: receipt.expirationDate = try date(value)
            default: break // Reserved by Apple: ignored, as the documentation asks.
            }
        }
        return receipt
    }

    private static func inAppPurchase(_ bytes: ArraySlice<UInt8>, budget: AttributeBudget) throws -> InAppPurchaseReceipt {
        var purchase = InAppPurchaseReceipt()
        try forEachAttribute(in: bytes, budget: budget) { type, value in
            switch type {
            case 1701: purchase.quantity = try integer(value)
            case 1702: purchase.productId = ProductID(try string(value))
            case 1703: purchase.transactionId = TransactionID(try string(value))
            case 1704: purchase.purchaseDate = try date(value)
            case 1705: purchase.originalTransactionId = TransactionID(try string(value))
            case 1706: purchase.originalPurchaseDate = try date(value)
            case 1708: purchase.expiresDate = try date(value)
            case 1711: purchase.webOrderLineItemId = try integer(value)
            case 1712: purchase.cancellationDate = try date(value)
            default: break
            }
        }
        return purchase
    }

    private static func forEachAttribute(in bytes: ArraySlice<UInt8>, budget: AttributeBudget,
                                         _ body: (Int64, ArraySlice<UInt8>) throws -> Void) throws {
        var outer = DERReader(bytes)
        var attributes = DERReader(try outer.next(expecting: DERReader.set).content)
        guard outer.isAtEnd else { throw DERReader.Malformed(description: "data after the attribute set") }
        while !attributes.isAtEnd {
            budget.remaining -= 1
            guard budget.remaining >= 0 else { throw DERReader.Malformed(description: "more than \(maxAttributes) attributes") }
            var attribute = DERReader(try attributes.next(expecting: DERReader.sequence).content)
            let type = try DERReader.integer(try attribute.next(expecting: DERReader.integer).content)
            _ = try attribute.next(expecting: DERReader.integer) // version
            let value = try attribute.next(expecting: DERReader.octetString).content
            try body(type, value)
        }
    }

    /// The value is itself DER: a UTF8String or IA5String.
    private static func string(_ value: ArraySlice<UInt8>) throws -> String {
        var reader = DERReader(value)
        let element = try reader.next()
        guard element.tag == DERReader.utf8String || element.tag == DERReader.ia5String else {
            throw DERReader.Malformed(description: "expected a string")
        }
        guard let text = String(validating: element.content, as: UTF8.self) else { throw DERReader.Malformed(description: "invalid UTF-8") }
        return text
    }

    private static func integer(_ value: ArraySlice<UInt8>) throws -> Int64 {
        var reader = DERReader(value)
        return try DERReader.integer(try reader.next(expecting: DERReader.integer).content)
    }

    /// An RFC 3339 date in an IA5String; an empty string means absent.
    private static func date(_ value: ArraySlice<UInt8>) throws -> Date? {
        let text = try string(value)
        if text.isEmpty { return nil }
        guard let date = RFC3339.parse(text) else { throw DERReader.Malformed(description: "invalid date '\(text.prefix(40))'") }
        return date
    }
}

/// How many more attributes one receipt may have, across its nested in-app sets.
private final class AttributeBudget {
    var remaining: Int
    init(remaining: Int) { self.remaining = remaining }
}

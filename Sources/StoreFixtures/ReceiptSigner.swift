import Crypto
import Foundation
import JSON
import StoreVerification

/// Builds StoreKit 1 app receipts in Apple's shape: the ASN.1 payload (Apple's field type numbers, the
/// receipt type in field 0) in a PKCS#7 SignedData signed by a `TestPKI` leaf, with the whole chain
/// (leaf, intermediates, root) embedded as Apple embeds it. A `TestPKI` made without the marker OIDs, or with
/// another `intermediateCount`, makes receipts that are not in Apple's shape.
public struct ReceiptSigner: Sendable {
    public let pki: TestPKI

    public init(pki: TestPKI) { self.pki = pki }

    /// Receipt types (field 0) as Apple writes them.
    public static let production = "Production", sandbox = "ProductionSandbox", xcode = "Xcode"

    /// A base64 receipt.
    public func sign(_ receipt: AppReceipt) throws -> String {
        try signedDER(receipt).base64EncodedString()
    }

    /// The receipt's DER PKCS#7 container.
    public func signedDER(_ receipt: AppReceipt) throws -> Data {
        try PKCS7SignedData.sign(content: Self.payload(receipt), signer: pki.leaf, key: pki.leafKey, chain: pki.intermediates + [pki.root])
    }

    /// The DER receipt payload.
    public static func payload(_ receipt: AppReceipt) -> Data {
        var attributes: [[UInt8]] = []
        func add(_ type: Int, _ value: [UInt8]?) {
            guard let value else { return }
            attributes.append(DER.sequence([DER.integer(Int64(type)), DER.integer(1), DER.octetString(value)]))
        }
        add(0, receipt.receiptType.map { DER.utf8String($0) })
        add(2, receipt.bundleId.map { DER.utf8String($0.rawValue) })
        add(3, receipt.appVersion.map { DER.utf8String($0) })
        add(12, receipt.creationDate.map { DER.ia5String(rfc3339($0)) })
        add(19, receipt.originalAppVersion.map { DER.utf8String($0) })
        add(21, receipt.expirationDate.map { DER.ia5String(rfc3339($0)) })
        for purchase in receipt.inAppPurchases {
            var fields: [[UInt8]] = []
            func field(_ type: Int, _ value: [UInt8]?) {
                guard let value else { return }
                fields.append(DER.sequence([DER.integer(Int64(type)), DER.integer(1), DER.octetString(value)]))
            }
            field(1701, purchase.quantity.map { DER.integer($0) })
            field(1702, purchase.productId.map { DER.utf8String($0.rawValue) })
            field(1703, purchase.transactionId.map { DER.utf8String($0.rawValue) })
            field(1704, purchase.purchaseDate.map { DER.ia5String(rfc3339($0)) })
            field(1705, purchase.originalTransactionId.map { DER.utf8String($0.rawValue) })
            field(1706, purchase.originalPurchaseDate.map { DER.ia5String(rfc3339($0)) })
            field(1708, purchase.expiresDate.map { DER.ia5String(rfc3339($0)) })
            field(1711, purchase.webOrderLineItemId.map { DER.integer($0) })
            field(1712, DER.ia5String(purchase.cancellationDate.map(rfc3339) ?? ""))
            add(17, DER.set(fields))
        }
        return Data(DER.set(attributes))
    }

    /// Receipts carry whole seconds, as Apple's do.
    static func rfc3339(_ date: Date) -> String { RFC3339.format(date, milliseconds: false) }
}

/// A minimal DER encoder for receipt payloads.
public enum DER {
    public static func tlv(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        var bytes = [tag]
        let count = content.count
        if count < 0x80 {
            bytes.append(UInt8(count))
        } else {
            var lengthBytes: [UInt8] = []
            var remaining = count
            while remaining > 0 {
                lengthBytes.insert(UInt8(remaining & 0xFF), at: 0)
                remaining >>= 8
            }
            bytes.append(0x80 | UInt8(lengthBytes.count))
            bytes.append(contentsOf: lengthBytes)
        }
        return bytes + content
    }

    public static func integer(_ value: Int64) -> [UInt8] {
        var bytes: [UInt8] = []
        var remaining = UInt64(value)
        repeat {
            bytes.insert(UInt8(remaining & 0xFF), at: 0)
            remaining >>= 8
        } while remaining > 0
        if bytes[0] & 0x80 != 0 { bytes.insert(0, at: 0) }
        return tlv(0x02, bytes)
    }

    public static func octetString(_ bytes: [UInt8]) -> [UInt8] { tlv(0x04, bytes) }
    public static func utf8String(_ text: String) -> [UInt8] { tlv(0x0C, Array(text.utf8)) }
    public static func ia5String(_ text: String) -> [UInt8] { tlv(0x16, Array(text.utf8)) }
    public static func sequence(_ elements: [[UInt8]]) -> [UInt8] { tlv(0x30, elements.flatMap { $0 }) }
    public static func set(_ elements: [[UInt8]]) -> [UInt8] { tlv(0x31, elements.flatMap { $0 }) }
}

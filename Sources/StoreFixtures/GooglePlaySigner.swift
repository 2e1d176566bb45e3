import Crypto
import Foundation
import JSON

/// A Google Play app's licensing key, as Google Play signs the purchase data the Play Billing Library gives the app
/// (`Purchase.getOriginalJson()` and `Purchase.getSignature()`).
public struct GooglePlaySigner: Sendable {
    public let key: PrivateKey

    public init() throws { key = try PrivateKey.generateRSA() }

    /// The app's public key as the Play Console shows it (base64 SubjectPublicKeyInfo).
    public func publicKeyBase64() throws -> String { try key.publicKeyBase64() }

    /// The purchase JSON the Play Billing Library gives the app, and its base64 signature.
    public func sign(packageName: String, productId: String, purchaseToken: String, orderId: String?, purchaseTime: Date = Date(), purchaseState: Int = 0,
                     quantity: Int = 1, obfuscatedAccountId: String? = nil) throws -> (purchaseData: String, signature: String) {
        var fields: [String: JSONValue] = [
            "packageName": .string(packageName), "productId": .string(productId), "purchaseToken": .string(purchaseToken),
            "purchaseTime": .integer(Int64(purchaseTime.timeIntervalSince1970 * 1000)), "purchaseState": .integer(Int64(purchaseState)),
            "quantity": .integer(Int64(quantity)), "acknowledged": .bool(false),
        ]
        if let orderId { fields["orderId"] = .string(orderId) }
        if let obfuscatedAccountId { fields["obfuscatedAccountId"] = .string(obfuscatedAccountId) }
        return try signedPurchaseData(fields, key: key)
    }
}

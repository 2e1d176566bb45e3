import Crypto
import Foundation
import JSON
import PurchaseDomain

/// What Google Play and AppCoins (which copies its shape) share: the billing library gives the app a purchase JSON naming
/// the package, product and token, signed with the app's RSA key (PKCS#1 v1.5), and the store's API is asked about the
/// purchase at `…/applications/{package}/purchases/products/{product}/tokens/{token}`.
public enum AndroidPurchaseData {
    /// The package, product and token the purchase JSON names; nil when it is not such a JSON object.
    public static func names(in purchaseData: String) -> (packageName: PackageName, productId: ProductID, purchaseToken: PurchaseToken)? {
        guard let signed = JSONValue.parse(Array(purchaseData.utf8))?.objectValue.map(JSONFields.init),
              let package: PackageName = signed.identifier("packageName"), let product: ProductID = signed.identifier("productId"),
              let token: PurchaseToken = signed.identifier("purchaseToken") else { return nil }
        return (package, product, token)
    }

    /// Why a submission is refused before the store is asked, or nil when it may be asked: the package is one of `apps`
    /// (of `store`), `signature` (base64) is that app's key's over `purchaseData`, which names this package, product and token.
    static func rejection(store: String, apps: [PackageName: PublicKey], packageName: PackageName, productId: ProductID, purchaseToken: PurchaseToken,
                          purchaseData: String, signature: String) -> Rejection? {
        guard let key = apps[packageName] else {
            return Rejection(.wrongPackage, "'\(packageName.rawValue.prefix(256))' is not one of this deployment's \(store) apps")
        }
        guard let signatureBytes = Data(base64Encoded: signature),
              RSADigest.allCases.contains(where: { key.verifyRSA(message: Data(purchaseData.utf8), signature: signatureBytes, digest: $0) }) else {
            return Rejection(.badSignature, "the purchase data is not signed with \(packageName)'s key")
        }
        guard let signed = names(in: purchaseData) else {
            return Rejection(.malformedPayload, "the signed purchase data is not a JSON object naming packageName, productId and purchaseToken")
        }
        // Identifiers compare byte for byte: the API is asked with the submission's bytes, which must be the signed ones.
        guard signed.packageName == packageName, signed.productId == productId, signed.purchaseToken == purchaseToken else {
            return Rejection(.malformedPayload, "the signed purchase data names another package, product or token than the submission")
        }
        return nil
    }

    /// The verdict on a purchase the store's API answered about: nil when it is paid for (`purchaseState` 0) and of the
    /// product asked about; pending (2: paid with a method that settles later) is retryable, as the verifier asks again
    /// until it settles; anything else (1: canceled) was not completed.
    static func verdict(purchaseState: Int64, answeredProduct: ProductID, asked productId: ProductID) -> Rejection? {
        guard answeredProduct == productId else {
            return Rejection(.storeRejected, "the token belongs to product '\(answeredProduct.rawValue.prefix(256))', not '\(productId.rawValue.prefix(256))'")
        }
        switch purchaseState {
        case 0: return nil
        case 2: return Rejection(.purchasePending, retryable: true, "the payment is pending; it is asked about again until it completes")
        default: return Rejection(.purchaseNotCompleted, "purchaseState \(purchaseState) (canceled)")
        }
    }

    /// The name of the first of package, product and token that cannot be one path segment of a request, or nil.
    static func invalidPathSegment(packageName: PackageName, productId: ProductID, purchaseToken: PurchaseToken) -> String? {
        invalidPathSegment([("package", packageName.rawValue), ("product", productId.rawValue), ("purchase token", purchaseToken.rawValue)])
    }

    /// The name of the first of `named` (name, value) that is not one path segment.
    static func invalidPathSegment(_ named: [(name: String, value: String)]) -> String? {
        for (name, value) in named
        // "." and ".." would name another path once the URL is normalised.
        where value.isEmpty || value.utf8.count > 1024 || value.utf8.contains(UInt8(ascii: "/")) || value.utf8.elementsEqual(".".utf8)
            || value.utf8.elementsEqual("..".utf8) {
            return name
        }
        return nil
    }

    /// The operator's apps from `PACKAGE=FILE` entries (the file holding the app's public key from the store's console:
    /// base64 or PEM SubjectPublicKeyInfo, RSA of 2048 bits or more). Throws a message naming the entry.
    public static func apps(fromEntries entries: [String]) throws -> [PackageName: PublicKey] {
        var apps: [PackageName: PublicKey] = [:]
        for entry in entries where !entry.isEmpty {
            guard let equals = entry.firstIndex(of: "="), case let package = String(entry[..<equals]), !package.isEmpty,
                  package.utf8.allSatisfy({ $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || (0x30...0x39).contains($0)
                      || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }) else {
                throw AppEntryError("expected PACKAGE=FILE with a package name of letters, digits, '.' and '_', got '\(entry)'")
            }
            guard apps[PackageName(package)] == nil else { throw AppEntryError("\(package) is named twice") }
            apps[PackageName(package)] = try publicKey(atPath: String(entry[entry.index(after: equals)...]))
        }
        return apps
    }

    /// An app's public key from the file the store's console gave (base64 or PEM SubjectPublicKeyInfo, RSA of 2048 bits or
    /// more). Throws a message naming the file.
    public static func publicKey(atPath path: String) throws -> PublicKey {
        guard let contents = FileManager.default.contents(atPath: path) else { throw AppEntryError("cannot read \(path)") }
        let key: PublicKey
        do { key = try PublicKey(subjectPublicKeyInfo: contents) } catch { throw AppEntryError("\(path): \(error)") }
        guard key.isRSA2048OrMore else { throw AppEntryError("\(path) is not an RSA key of 2048 bits or more") }
        return key
    }
}

/// An app entry (`PACKAGE=FILE`) that cannot be used.
public struct AppEntryError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

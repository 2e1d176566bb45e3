import Crypto
import Foundation
import HTTPServer
import JSON
import Synchronization

/// The AppCoins (Catappult) purchase API as tests and the operator's harness play it, over real HTTP:
/// `GET /productv2/8.20250505/google/inapp/v3/applications/{package}/purchases/products/{sku}/tokens/{token}` answers
/// the purchase (a Google-style ProductPurchase) of a token it was given for that package and SKU, else 404.
public final class AppCoinsAPIStandIn: Sendable {
    /// One purchase the store knows.
    public struct Purchase: Sendable {
        public var packageName: String
        public var sku: String
        public var orderId: String
        /// 0 purchased, 1 canceled, 2 pending.
        public var purchaseState: Int
        /// 0 not yet consumed, 1 consumed.
        public var consumptionState: Int
        public var purchaseTime: Date

        public init(packageName: String, sku: String, orderId: String, purchaseState: Int = 0, consumptionState: Int = 0, purchaseTime: Date = Date()) {
            self.packageName = packageName
            self.sku = sku
            self.orderId = orderId
            self.purchaseState = purchaseState
            self.consumptionState = consumptionState
            self.purchaseTime = purchaseTime
        }
    }

    public static let pathPrefix = "/productv2/8.20250505/google/inapp/v3/applications/"

    public let server: HTTPServer
    private let purchases: Registry

    /// The purchases by token, and the paths asked, shared with the handler.
    final class Registry: Sendable {
        let byToken: Mutex<[String: Purchase]>
        let asked = Mutex<[String]>([])
        init(_ purchases: [String: Purchase]) { byToken = Mutex(purchases) }
    }

    /// Every request's path, in order.
    public var requests: [String] { purchases.asked.withLock { $0 } }

    public var baseURL: URL { URL(string: "http://127.0.0.1:\(server.port)")! }

    /// `purchases` by purchase token.
    public init(purchases: [String: Purchase]) throws {
        let known = Registry(purchases)
        self.purchases = known
        server = try HTTPServer(synchronousHandler: { request in
            known.asked.withLock { $0.append(request.path) }
            guard request.method == "GET", request.path.hasPrefix(Self.pathPrefix) else { return HTTPResponse(status: 404) }
            // {package}/purchases/products/{sku}/tokens/{token}
            let parts = request.path.dropFirst(Self.pathPrefix.count).split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 6, parts[1] == "purchases", parts[2] == "products", parts[4] == "tokens",
                  let purchase = known.byToken.withLock({ $0[parts[5]] }), purchase.packageName == parts[0], purchase.sku == parts[3] else {
                return HTTPResponse(status: 404, contentType: "application/json", body: #"{"error":{"code":404,"message":"Not found"}}"#)
            }
            let body: [String: JSONValue] = [
                "kind": .string("androidpublisher#productPurchase"), "purchaseTimeMillis": .string(String(Int64(purchase.purchaseTime.timeIntervalSince1970 * 1000))),
                "purchaseState": .integer(Int64(purchase.purchaseState)), "consumptionState": .integer(Int64(purchase.consumptionState)),
                "orderId": .string(purchase.orderId), "acknowledgementState": .integer(0), "purchaseToken": .string(parts[5]),
                "productId": .string(purchase.sku), "regionCode": .string("PT"), "currency": .string("EUR"),
            ]
            let encoded = (try? JSONEncoder().encode(JSONValue.object(body))) ?? Data() // strings and integers always encode
            return HTTPResponse(status: 200, headers: ["Content-Type": "application/json"], body: encoded)
        })
    }

    /// Adds or changes the purchase of `token` (e.g. the app consumed it).
    public func set(_ token: String, _ purchase: Purchase) { purchases.byToken.withLock { $0[token] = purchase } }
}

/// An AppCoins app's signing key, as the store's billing SDK signs purchase data with it.
public struct AppCoinsSigner: Sendable {
    public let key: PrivateKey

    public init() throws { key = try PrivateKey.generateRSA() }

    /// The app's public key as the store's back office shows it (base64 SubjectPublicKeyInfo).
    public func publicKeyBase64() throws -> String { try key.publicKeyBase64() }

    /// The purchase JSON the SDK gives the app, and its base64 signature.
    public func sign(packageName: String, sku: String, purchaseToken: String, orderId: String, purchaseTime: Date = Date(),
                     purchaseState: Int = 0) throws -> (purchaseData: String, signature: String) {
        let fields: [String: JSONValue] = [
            "orderId": .string(orderId), "packageName": .string(packageName), "productId": .string(sku),
            "purchaseTime": .integer(Int64(purchaseTime.timeIntervalSince1970 * 1000)), "purchaseToken": .string(purchaseToken),
            "purchaseState": .integer(Int64(purchaseState)), "developerPayload": .string(""),
        ]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = String(decoding: try encoder.encode(JSONValue.object(fields)), as: UTF8.self)
        return (data, try key.signRSA(Data(data.utf8), digest: .sha1).base64EncodedString())
    }
}

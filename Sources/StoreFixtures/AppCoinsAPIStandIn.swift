import Crypto
import Foundation
import HTTPServer
import JSON
import PurchaseDomain
import Synchronization

/// The AppCoins (Catappult) purchase API as tests and the harness play it, over real HTTP with kept-alive connections:
/// `GET /productv2/8.20250505/google/inapp/v3/applications/{package}/purchases/products/{sku}/tokens/{token}` answers
/// the purchase (a Google-style ProductPurchase) of a token it was given for that package and SKU, else 404. Every
/// request is recorded; failures (a status for one token or for all) and stalls are injected on demand.
public final class AppCoinsAPIStandIn: Sendable {
    /// One purchase the store knows.
    public struct Purchase: Sendable {
        public var packageName: PackageName
        public var sku: ProductID
        public var orderId: TransactionID
        /// 0 purchased, 1 canceled, 2 pending.
        public var purchaseState: Int
        /// 0 not yet consumed, 1 consumed.
        public var consumptionState: Int
        /// Nil: the answer leaves `purchaseTimeMillis` out.
        public var purchaseTime: Date?
        public var developerPayload: String?
        /// The `productId` the API answers when it is not `sku` (a mismatch the client must refuse).
        public var answeredProductId: ProductID?

        public init(packageName: PackageName, sku: ProductID, orderId: TransactionID, purchaseState: Int = 0, consumptionState: Int = 0, purchaseTime: Date? = Date(),
                    developerPayload: String? = nil, answeredProductId: ProductID? = nil) {
            self.packageName = packageName
            self.sku = sku
            self.orderId = orderId
            self.purchaseState = purchaseState
            self.consumptionState = consumptionState
            self.purchaseTime = purchaseTime
            self.developerPayload = developerPayload
            self.answeredProductId = answeredProductId
        }
    }

    public static let pathPrefix = "/productv2/8.20250505/google/inapp/v3/applications/"

    public let server: HTTPServer
    private let state: Registry

    /// The purchases by token, the paths asked and the faults injected, shared with the handler.
    final class Registry: Sendable {
        struct Faults {
            /// Status answered for every request (the API down), else by token.
            var all: Int?
            var byToken: [PurchaseToken: Int] = [:]
            var stalls: [PurchaseToken: Duration] = [:]
        }

        let byToken: Mutex<[PurchaseToken: Purchase]>
        let asked = Mutex<[String]>([])
        let faults = Mutex(Faults())
        init(_ purchases: [PurchaseToken: Purchase]) { byToken = Mutex(purchases) }
    }

    /// Every request's path, in order.
    public var requests: [String] { state.asked.withLock { $0 } }

    public var baseURL: URL { URL(string: "http://127.0.0.1:\(server.port)")! }

    /// `purchases` by purchase token. Tokens, packages and SKUs are matched by their bytes, as the store's API does.
    public init(purchases: [PurchaseToken: Purchase], configuration: HTTPServer.Configuration = .init()) throws {
        let known = Registry(purchases)
        state = known
        server = try HTTPServer(configuration: configuration, synchronousHandler: { request in
            known.asked.withLock { $0.append(request.path) }
            guard request.method == "GET", request.path.hasPrefix(Self.pathPrefix) else { return HTTPResponse(status: 404) }
            // {package}/purchases/products/{sku}/tokens/{token}
            // Each segment percent-decoded, as the API reads it.
            let parts = request.path.dropFirst(Self.pathPrefix.count).split(separator: "/", omittingEmptySubsequences: false)
                .map { String($0).removingPercentEncoding ?? String($0) }
            let token = PurchaseToken(parts.count == 6 ? parts[5] : "")
            let (failure, stall) = known.faults.withLock { ($0.all ?? $0.byToken[token], $0.stalls[token]) }
            // On the connection's own thread: a stall holds this request only, as a slow API would.
            if let stall { Thread.sleep(forTimeInterval: Double(stall.components.seconds) + Double(stall.components.attoseconds) / 1e18) }
            if let failure {
                return HTTPResponse(status: failure, contentType: "application/json", body: #"{"error":{"code":\#(failure),"message":"Injected failure"}}"#)
            }
            guard parts.count == 6, parts[1] == "purchases", parts[2] == "products", parts[4] == "tokens",
                  let purchase = known.byToken.withLock({ $0[token] }), purchase.packageName == PackageName(parts[0]), purchase.sku == ProductID(parts[3]) else {
                return HTTPResponse(status: 404, contentType: "application/json", body: #"{"error":{"code":404,"message":"Not found"}}"#)
            }
            var body: [String: JSONValue] = [
                "kind": .string("androidpublisher#productPurchase"),
                "purchaseState": .integer(Int64(purchase.purchaseState)), "consumptionState": .integer(Int64(purchase.consumptionState)),
                "orderId": .string(purchase.orderId.rawValue), "acknowledgementState": .integer(0), "purchaseToken": .string(token.rawValue),
                "productId": .string((purchase.answeredProductId ?? purchase.sku).rawValue), "regionCode": .string("PT"), "currency": .string("EUR"),
            ]
            if let payload = purchase.developerPayload { body["developerPayload"] = .string(payload) }
            if let time = purchase.purchaseTime { body["purchaseTimeMillis"] = .string(String(Int64(time.timeIntervalSince1970 * 1000))) }
            return HTTPResponse(status: 200, headers: ["Content-Type": "application/json"], body: Data(JSONValue.object(body).serializedText.utf8))
        })
    }

    /// Adds or changes the purchase of `token` (e.g. the app consumed it).
    public func set(_ token: PurchaseToken, _ purchase: Purchase) { state.byToken.withLock { $0[token] = purchase } }

    /// Answers requests for `token` (nil: every request, the API down) with `status` from now on; nil: as documented again.
    public func fail(_ status: Int?, token: PurchaseToken? = nil) {
        state.faults.withLock { faults in
            if let token { faults.byToken[token] = status } else { faults.all = status }
        }
    }

    /// Holds each request for `token` for `duration` before answering it (longer than a client's timeout: a hung API).
    public func stall(_ token: PurchaseToken, for duration: Duration) { state.faults.withLock { $0.stalls[token] = duration } }
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
        return try signedPurchaseData(fields, key: key)
    }
}

/// Purchase data as an Android billing library gives it to the app (a JSON text), and its base64 SHA1withRSA signature by `key`.
func signedPurchaseData(_ fields: [String: JSONValue], key: PrivateKey) throws -> (purchaseData: String, signature: String) {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    let data = String(decoding: try encoder.encode(JSONValue.object(fields)), as: UTF8.self)
    return (data, try key.signRSA(Data(data.utf8), digest: .sha1).base64EncodedString())
}

import Crypto
import Foundation
import HTTPClient
import JSON
import PurchaseDomain

/// A purchase as the AppCoins (Aptoide/Catappult) API reports it; the shape follows Google's ProductPurchase.
public struct AppCoinsPurchase: Sendable, Hashable {
    public var packageName: PackageName
    public var productId: ProductID
    public var purchaseToken: PurchaseToken
    public var orderId: TransactionID?
    public var purchaseTime: Date?
    /// 0 purchased, 1 canceled, 2 pending.
    public var purchaseState: Int64
    /// 0 not yet consumed, 1 consumed.
    public var consumptionState: Int64?
    public var acknowledgementState: Int64?
    public var developerPayload: String?
    public var regionCode: String?
    public var currency: String?
    public var raw: [String: JSONValue]

    /// Unconsumed AppCoins purchases are refunded automatically after 24 hours.
    public var isConsumed: Bool { consumptionState == 1 }
    /// The id effects are keyed by: the order id, or the token where the API gives none.
    public var transactionId: TransactionID { orderId ?? TransactionID(purchaseToken) }
}

/// Checks AppCoins purchases of the operator's own apps: a submission is verified (`verifySigned`) only for a
/// package the operator configured, its purchase data signed with that app's public key from the store's back
/// office (RSA PKCS#1 v1.5), naming the package, SKU and token it claims; then the store's API confirms it
/// server to server (`verify`, which the sweeper also uses to re-check consumption):
/// `GET {base}/productv2/8.20250505/google/inapp/v3/applications/{package}/purchases/products/{sku}/tokens/{token}`.
///
/// 200 with `purchaseState` 0 verifies; 2 (pending) is a verdict of its own (`purchasePending`, retryable: ask
/// again once the payment completes); 404 and 410 are permanent rejections; timeouts, 429 and 5xx are
/// retryable. AppCoins has no server-side consume call: apps consume with `finish()` on the device.
public final class AppCoinsVerifier: Sendable {
    public struct Configuration: Sendable {
        public var baseURL: URL
        public var timeout: Duration
        /// Extra request headers (e.g. credentials, when the account requires them).
        public var headers: [String: String]
        /// The operator's apps: package name → the app's public key. Purchases of other packages are refused.
        public var apps: [PackageName: PublicKey]
        /// Told the outcome of every call to the API; nil: nobody is.
        public var observer: StoreAPIObserver?

        public static let defaultBaseURL = URL(string: "https://api.catappult.io")!

        public init(baseURL: URL = defaultBaseURL, timeout: Duration = .seconds(10), headers: [String: String] = [:], apps: [PackageName: PublicKey] = [:],
                    observer: StoreAPIObserver? = nil) {
            self.baseURL = baseURL
            self.timeout = timeout
            self.headers = headers
            self.apps = apps
            self.observer = observer
        }
    }

    public let configuration: Configuration
    private let http: StoreAPISession

    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        http = StoreAPISession(timeout: configuration.timeout, observer: configuration.observer)
    }

    /// The URL the check for this purchase goes to.
    /// The configured headers, with `Accept: application/json` unless they set their own (sorted: the same every time).
    static func headers(_ configured: [String: String]) -> [(name: String, value: String)] {
        let accept = configured.keys.contains { $0.lowercased() == "accept" } ? [] : [(name: "Accept", value: "application/json")]
        return accept + configured.sorted { $0.key < $1.key }.map { (name: $0.key, value: $0.value) }
    }

    public func url(packageName: PackageName, sku: ProductID, purchaseToken: PurchaseToken) -> URL {
        var url = configuration.baseURL
        for component in ["productv2", "8.20250505", "google", "inapp", "v3", "applications", packageName.rawValue,
                          "purchases", "products", sku.rawValue, "tokens", purchaseToken.rawValue] {
            url.appendPathComponent(component)
        }
        return url
    }

    /// A submitted purchase: the package is one of the operator's apps, `signature` (base64) is that app's key's over
    /// `purchaseData` (the purchase JSON exactly as the billing SDK gave it), which names this package, SKU and
    /// token; then the store's API is asked.
    public func verifySigned(packageName: PackageName, sku: ProductID, purchaseToken: PurchaseToken, purchaseData: String, signature: String) async
        -> Result<AppCoinsPurchase, Rejection> {
        if let rejection = AndroidPurchaseData.rejection(store: "AppCoins", apps: configuration.apps, packageName: packageName, productId: sku,
                                                         purchaseToken: purchaseToken, purchaseData: purchaseData, signature: signature) {
            return .failure(rejection)
        }
        return await verify(packageName: packageName, sku: sku, purchaseToken: purchaseToken)
    }

    /// The store's API's view of a purchase (no signature involved: for re-checks of purchases verified before).
    public func verify(packageName: PackageName, sku: ProductID, purchaseToken: PurchaseToken) async -> Result<AppCoinsPurchase, Rejection> {
        if let invalid = AndroidPurchaseData.invalidPathSegment(packageName: packageName, productId: sku, purchaseToken: purchaseToken) {
            return .failure(Rejection(.storeRejected, "invalid \(invalid)"))
        }
        let request = HTTPClient.Request(method: "GET", url: url(packageName: packageName, sku: sku, purchaseToken: purchaseToken).absoluteString,
                                         headers: Self.headers(configuration.headers))
        let status: Int
        let data: [UInt8]
        switch await http.send(request) {
        case .success(let response): (status, data) = (response.status, response.body)
        case .failure(let failure): return .failure(Rejection(.storeUnavailable, retryable: true, "AppCoins API: \(failure)"))
        }
        switch status {
        case 200:
            break
        case 404, 410:
            return .failure(Rejection(.storeRejected, "AppCoins API: no such purchase (HTTP \(status))"))
        case 429, 500...599:
            return .failure(Rejection(.storeUnavailable, retryable: true, "AppCoins API answered HTTP \(status)"))
        case 400:
            return .failure(Rejection(.storeRejected, "AppCoins API: bad request (HTTP 400)"))
        default:
            // 401/403 and anything unexpected: a configuration or API problem, not a verdict on the purchase.
            return .failure(Rejection(.storeUnavailable, retryable: true, "AppCoins API answered HTTP \(status)"))
        }
        guard let fields = JSONValue.parse(data)?.objectValue else {
            return .failure(Rejection(.storeUnavailable, retryable: true, "AppCoins API: body is not a JSON object"))
        }
        let json = JSONFields(object: fields)
        func int(_ key: String) -> Int64? { json.int64(key) }
        guard let state = int("purchaseState") else {
            return .failure(Rejection(.storeUnavailable, retryable: true, "AppCoins API: purchaseState missing"))
        }
        let purchase = AppCoinsPurchase(
            packageName: packageName, productId: json.identifier("productId") ?? sku,
            purchaseToken: json.identifier("purchaseToken") ?? purchaseToken, orderId: json.identifier("orderId"),
            purchaseTime: int("purchaseTimeMillis").flatMap(EpochMilliseconds.date),
            purchaseState: state, consumptionState: int("consumptionState"), acknowledgementState: int("acknowledgementState"),
            developerPayload: json.string("developerPayload"), regionCode: json.string("regionCode"),
            currency: json.string("currency"), raw: fields)
        if let rejection = AndroidPurchaseData.verdict(purchaseState: state, answeredProduct: purchase.productId, asked: sku) {
            return .failure(rejection)
        }
        return .success(purchase)
    }
}

extension Duration {
    var seconds: TimeInterval { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

import Foundation
import HTTPClient
import JSON
import PurchaseDomain

/// Calls the Google Play Android Publisher API (v3) about purchases, authenticated as a service account the Play Console
/// granted access to the apps' orders: one-time products with
/// `GET {base}/androidpublisher/v3/applications/{package}/purchases/products/{product}/tokens/{token}` and `POST` of the
/// same path with `:acknowledge` or `:consume`; subscriptions with `GET …/purchases/subscriptionsv2/tokens/{token}` and
/// `POST …/purchases/subscriptions/{product}/tokens/{token}:acknowledge`; an order's refund with
/// `POST …/orders/{order}:refund`. An access token the API refuses (`401`) is replaced once per call.
public final class AndroidPublisherClient: Sendable {
    public struct Configuration: Sendable {
        public var baseURL: URL
        public var timeout: Duration
        /// Told the outcome of every call to the API (the service account's token exchanges are its own); nil: nobody is.
        public var observer: StoreAPIObserver?

        public static let defaultBaseURL = URL(string: "https://androidpublisher.googleapis.com")!

        public init(baseURL: URL = defaultBaseURL, timeout: Duration = .seconds(10), observer: StoreAPIObserver? = nil) {
            self.baseURL = baseURL
            self.timeout = timeout
            self.observer = observer
        }
    }

    /// Retry later (the network, a timeout, 429, 5xx, 409, credentials or permissions an operator must fix), or refused
    /// about this purchase (404 unknown, 410 no longer valid, 400 not in a state that allows it, or a value it does not
    /// take; `detail` names Google's reason after the status, `HTTP 400 invalid: Invalid Value`): the store clients' one
    /// failure.
    public typealias Failure = StoreAPIFailure

    public let configuration: Configuration
    public let serviceAccount: GoogleServiceAccount
    private let http: StoreAPISession
    /// `{base}/androidpublisher/v3/applications/`.
    let applicationsURL: String

    public init(configuration: Configuration = Configuration(), serviceAccount: GoogleServiceAccount) {
        self.configuration = configuration
        self.serviceAccount = serviceAccount
        let base = configuration.baseURL.absoluteString
        applicationsURL = (base.hasSuffix("/") ? base : base + "/") + "androidpublisher/v3/applications/"
        http = StoreAPISession(timeout: configuration.timeout, observer: configuration.observer)
    }

    /// `purchases.products.get`: the purchase of `purchaseToken`.
    public func productPurchase(packageName: PackageName, productId: ProductID, purchaseToken: PurchaseToken) async
        -> Result<GooglePlayProductPurchase, Failure> {
        await call("GET", packageName, productId, purchaseToken, action: "").flatMap { body in
            guard let fields = JSONValue.parse(body)?.objectValue,
                  let purchase = GooglePlayProductPurchase(answer: fields, packageName: packageName, productId: productId, purchaseToken: purchaseToken)
            else { return .failure(.unavailable("Android Publisher API: an answer that is not a ProductPurchase")) }
            return .success(purchase)
        }
    }

    /// `purchases.products.acknowledge`: the entitlement was delivered (Google refunds a purchase neither acknowledged nor
    /// consumed within three days). Succeeds also when the purchase was acknowledged before.
    public func acknowledge(packageName: PackageName, productId: ProductID, purchaseToken: PurchaseToken) async -> Result<Void, Failure> {
        await complete(":acknowledge", packageName, productId, purchaseToken) { $0.isAcknowledged }
    }

    /// `purchases.products.consume`: the consumable was delivered and may be bought again. Succeeds also when the
    /// purchase was consumed before (by an earlier call, or by the app on the device).
    public func consume(packageName: PackageName, productId: ProductID, purchaseToken: PurchaseToken) async -> Result<Void, Failure> {
        await complete(":consume", packageName, productId, purchaseToken) { $0.isConsumed }
    }

    /// `purchases.subscriptionsv2.get`: the subscription of `purchaseToken`, its line item of `productId` (nil: a
    /// notification that does not name it; the API needs the token alone, and the answer's first line item is taken).
    public func subscriptionPurchase(packageName: PackageName, productId: ProductID?, purchaseToken: PurchaseToken) async
        -> Result<GooglePlaySubscriptionPurchase, Failure> {
        // The product is not part of the path, but one given must be a name the API could be asked about.
        let named = [("package", packageName.rawValue), ("purchase token", purchaseToken.rawValue)] + (productId.map { [("product", $0.rawValue)] } ?? [])
        let encoded: [String]
        switch Self.pathSegments(named) {
        case .success(let segments): encoded = segments
        case .failure(let failure): return .failure(failure)
        }
        return await send("GET", url: applicationsURL + encoded[0] + "/purchases/subscriptionsv2/tokens/" + encoded[1]).flatMap { body in
            guard let fields = JSONValue.parse(body)?.objectValue,
                  let purchase = GooglePlaySubscriptionPurchase(answer: fields, packageName: packageName, productId: productId, purchaseToken: purchaseToken)
            else { return .failure(.unavailable("Android Publisher API: an answer that is not a SubscriptionPurchaseV2 of product \(productId?.rawValue ?? "(any)")")) }
            return .success(purchase)
        }
    }

    /// `purchases.subscriptions.acknowledge`: the subscription was delivered (Google refunds a signup not acknowledged
    /// within three days). Succeeds also when it was acknowledged before.
    public func acknowledgeSubscription(packageName: PackageName, productId: ProductID, purchaseToken: PurchaseToken) async -> Result<Void, Failure> {
        let answer = await request("POST", packageName, productId, purchaseToken) { _, product, token in
            "/purchases/subscriptions/" + product + "/tokens/" + token + ":acknowledge"
        }
        guard case .failure(let failure) = answer, case .refused(400, let detail) = failure, !failure.isInvalidValue else { return answer.map { _ in } }
        switch await subscriptionPurchase(packageName: packageName, productId: productId, purchaseToken: purchaseToken) {
        case .success(let purchase) where purchase.isAcknowledged: return .success(())
        case .success: return .failure(.refused(status: 400, detail: detail))
        case .failure(let failure): return .failure(failure)
        }
    }

    /// `orders.refund` with `revoke=true`: the order's money goes back to the customer and the item is taken away (a
    /// consumed item only the app can take back). Google's answer is empty.
    public func refund(packageName: PackageName, orderId: TransactionID) async -> Result<Void, Failure> {
        switch Self.pathSegments([("package", packageName.rawValue), ("order id", orderId.rawValue)]) {
        case .success(let encoded): return await send("POST", url: applicationsURL + encoded[0] + "/orders/" + encoded[1] + ":refund?revoke=true").map { _ in }
        case .failure(let failure): return .failure(failure)
        }
    }

    /// An acknowledge or consume. Google answers 400 when the purchase is already in the state asked for; the purchase is
    /// then read, so a repeat (a retry after a lost answer, a redelivered message) succeeds and a real refusal stays one.
    private func complete(_ action: String, _ packageName: PackageName, _ productId: ProductID, _ purchaseToken: PurchaseToken,
                          done: (GooglePlayProductPurchase) -> Bool) async -> Result<Void, Failure> {
        let answer = await call("POST", packageName, productId, purchaseToken, action: action)
        guard case .failure(let failure) = answer, case .refused(400, let detail) = failure, !failure.isInvalidValue else { return answer.map { _ in } }
        switch await productPurchase(packageName: packageName, productId: productId, purchaseToken: purchaseToken) {
        case .success(let purchase) where done(purchase): return .success(())
        case .success: return .failure(.refused(status: 400, detail: detail))
        case .failure(let failure): return .failure(failure)
        }
    }

    /// One call about a one-time product purchase: the answer's body.
    private func call(_ method: String, _ packageName: PackageName, _ productId: ProductID, _ purchaseToken: PurchaseToken,
                      action: String) async -> Result<[UInt8], Failure> {
        await request(method, packageName, productId, purchaseToken) { _, product, token in "/purchases/products/" + product + "/tokens/" + token + action }
    }

    /// One call about a purchase, its path after the package (`path` of the encoded package, product and token): the
    /// answer's body.
    private func request(_ method: String, _ packageName: PackageName, _ productId: ProductID, _ purchaseToken: PurchaseToken,
                         path: (String, String, String) -> String) async -> Result<[UInt8], Failure> {
        switch Self.pathSegments([("package", packageName.rawValue), ("product", productId.rawValue), ("purchase token", purchaseToken.rawValue)]) {
        case .success(let encoded): return await send(method, url: applicationsURL + encoded[0] + path(encoded[0], encoded[1], encoded[2]))
        case .failure(let failure): return .failure(failure)
        }
    }

    static func pathSegment(_ text: String) -> String? { text.addingPercentEncoding(withAllowedCharacters: .urlUnreserved) }

    /// The values of `named` as path segments of a request, percent-encoded; or, refused before any request, which one
    /// is not one path segment (`AndroidPurchaseData.invalidPathSegment`) or cannot be encoded.
    static func pathSegments(_ named: [(name: String, value: String)]) -> Result<[String], Failure> {
        if let invalid = AndroidPurchaseData.invalidPathSegment(named) { return .failure(.refused(status: 0, detail: "invalid \(invalid)")) }
        let encoded = named.compactMap { pathSegment($0.value) }
        guard encoded.count == named.count else { return .failure(.refused(status: 0, detail: "a name that cannot be percent-encoded")) }
        return .success(encoded)
    }

    /// One request, with a fresh access token once if the API refuses the cached one: the answer's body. Every call of the
    /// client comes through here: while a wait the API asked for runs (`Retry-After`), none is made.
    func send(_ method: String, url: String) async -> Result<[UInt8], Failure> {
        for attempt in 1...2 {
            if let held = http.holdsCalls("Android Publisher API") { return .failure(held) }
            let accessToken: String
            switch await serviceAccount.accessToken() {
            case .success(let token): accessToken = token
            case .failure(let failure): return .failure(failure)
            }
            var headers: [(name: String, value: String)] = [("Authorization", "Bearer " + accessToken), ("Accept", "application/json")]
            if method == "POST" { headers.append(("Content-Type", "application/json")) }
            let request = HTTPClient.Request(method: method, url: url, headers: headers, body: method == "POST" ? Array("{}".utf8) : nil)
            let response: HTTPClient.Response
            switch await http.send(request) {
            case .success(let answered): response = answered
            case .failure(let failure): return .failure(.unavailable("Android Publisher API: \(failure)"))
            }
            if response.status == 401 && attempt == 1 {
                serviceAccount.invalidate(accessToken)
                continue
            }
            return outcome(response)
        }
        return .failure(.unavailable("Android Publisher API: no answer"))
    }

    /// What an answer means: 2xx is success; what may pass (401 after a fresh token, 403 — the service account lacks
    /// access, an operator must grant it —, 408, 409, 429, 5xx) is `unavailable`; the rest (a `400` too, whatever its
    /// reason: `invalid`, `required`, a state that does not allow it) is `refused`, for good, with Google's reason
    /// (`error.errors[0].reason`) and message.
    private func outcome(_ response: HTTPClient.Response) -> Result<[UInt8], Failure> {
        let error = JSONValue.parse(response.body)?.objectValue?["error"]?.objectValue
        let message = error?["message"]?.stringValue
        let reason = error?["errors"]?.arrayValue?.first?.objectValue?["reason"]?.stringValue.flatMap { $0.isEmpty ? nil : String($0.prefix(64)) }
        let detail = "HTTP \(response.status)" + (reason.map { " " + $0 } ?? "") + (message.map { ": " + String($0.prefix(300)) } ?? "")
        switch response.status {
        case 200...299: return .success(response.body)
        case 401, 403, 408, 409, 429, 500...599, 0:
            return .failure(.unavailable("Android Publisher API answered \(detail)", retryAfter: StoreAPISession.wait(response.retryAfter, now: Date())))
        default:
            return .failure(.refused(status: response.status, detail: detail))
        }
    }
}

extension StoreAPIFailure {
    /// A `400` whose reason is an invalid value (Google's `invalid` or `invalidValue`, `Invalid Value`: typically a
    /// malformed purchase token): the request itself is wrong, whatever the purchase's state, and asking again, or
    /// reading the purchase with the same values, cannot succeed.
    public var isInvalidValue: Bool {
        guard case .refused(400, let detail) = self else { return false }
        return detail.hasPrefix("HTTP 400 invalid:") || detail.hasPrefix("HTTP 400 invalidValue:") || detail.hasSuffix(": Invalid Value")
    }
}

import Crypto
import Foundation
import HTTPServer
import JSON
import PurchaseDomain
import Synchronization

/// Google Play's Android Publisher API (v3, one-time products; subscriptions in `+Subscriptions`) and Google's OAuth 2.0 token endpoint as tests play them,
/// over real HTTP, as Google documents them:
/// - `POST /token` exchanges a service account's RS256 JWT assertion (grant type `jwt-bearer`; `iss` the account's e-mail,
///   `scope` androidpublisher, `aud` this URL, at most an hour's lifetime) for an access token; else 400 `invalid_grant`.
/// - `GET /androidpublisher/v3/applications/{package}/purchases/products/{product}/tokens/{token}` answers the
///   `ProductPurchase` of a token it was given for that package and product; 404 for another, 410 for one made invalid.
/// - `POST` of that path with `:acknowledge` or `:consume` acknowledges or consumes it; 400 when its state does not allow it
///   (already done, not purchased).
/// - `POST /androidpublisher/v3/applications/{package}/orders/{order}:refund` refunds a one-time product's order: canceled,
///   and voided by the developer; 400 when it is not purchased (refunded or canceled already).
/// - `GET /androidpublisher/v3/applications/{package}/purchases/voidedpurchases` lists the package's purchases voided
///   (`void`) between `startTime` and `endTime` (milliseconds; the time Google recorded them voided, at most 30 days back,
///   not after now), oldest first, `maxResults` (and at most `voidedPageSize`) a page, the next named by
///   `tokenPagination.nextPageToken` (given as `token`, the times are then ignored). One-time products only, unless
///   `type=1` (subscription orders too); quantity-based partial refunds (`voidedQuantity`) only with
///   `includeQuantityBasedPartialRefund=true`.
/// - A token that is not well-formed (`malform`) is answered 400 `Invalid Value`, reason `invalid`, whatever is asked.
/// - Every API request needs a current access token (401 otherwise). Errors are Google's JSON (`error.code`,
///   `error.message`, `error.status`). Every request is recorded; failures and stalls are injected on demand.
public final class GooglePlayAPIStandIn: Sendable {
    /// One purchase Google knows.
    public struct Purchase: Sendable {
        public var packageName: PackageName
        public var productId: ProductID
        /// Nil: the answer leaves `orderId` out (as for some test purchases).
        public var orderId: TransactionID?
        /// 0 purchased, 1 canceled, 2 pending.
        public var purchaseState: Int
        /// 0 yet to be consumed, 1 consumed.
        public var consumptionState: Int
        /// 0 yet to be acknowledged, 1 acknowledged.
        public var acknowledgementState: Int
        /// Nil: left out (a real purchase); 0 test, 1 promo, 2 rewarded.
        public var purchaseType: Int?
        public var quantity: Int
        public var obfuscatedExternalAccountId: String?
        public var purchaseTime: Date?
        /// The `productId` answered when it is not `productId` (a mismatch the client must refuse).
        public var answeredProductId: ProductID?

        public init(packageName: PackageName, productId: ProductID, orderId: TransactionID?, purchaseState: Int = 0, consumptionState: Int = 0,
                    acknowledgementState: Int = 0, purchaseType: Int? = nil, quantity: Int = 1, obfuscatedExternalAccountId: String? = nil,
                    purchaseTime: Date? = Date(), answeredProductId: ProductID? = nil) {
            self.packageName = packageName
            self.productId = productId
            self.orderId = orderId
            self.purchaseState = purchaseState
            self.consumptionState = consumptionState
            self.acknowledgementState = acknowledgementState
            self.purchaseType = purchaseType
            self.quantity = quantity
            self.obfuscatedExternalAccountId = obfuscatedExternalAccountId
            self.purchaseTime = purchaseTime
            self.answeredProductId = answeredProductId
        }
    }

    public static let apiPrefix = "/androidpublisher/v3/applications/"
    public let server: HTTPServer
    public let serviceAccountEmail = "iap-pipeline@stand-in-project.iam.gserviceaccount.com"
    private let serviceAccountKey: PrivateKey
    private let state: Registry

    /// The purchases, access tokens, counts, requests and faults, shared with the handler.
    final class Registry: Sendable {
        struct Faults {
            var all: (status: Int, retryAfter: Int?)?
            var byToken: [PurchaseToken: (status: Int, retryAfter: Int?)] = [:]
            var stalls: [PurchaseToken: Duration] = [:]
            var tokenEndpoint: Int?
            var tokenStall: Duration?
        }

        struct Books {
            var purchases: [PurchaseToken: Purchase]
            var invalid: Set<PurchaseToken> = []
            /// Tokens Google does not take as tokens at all: 400 `Invalid Value` (reason `invalid`) for any call about them.
            var malformed: Set<PurchaseToken> = []
            /// Access tokens issued, with when each expires.
            var accessTokens: [String: Date] = [:]
            var subscriptions: [PurchaseToken: Subscription] = [:]
            var acknowledgedSubscriptions: [PurchaseToken: Int] = [:]
            var acknowledged: [PurchaseToken: Int] = [:]
            var consumed: [PurchaseToken: Int] = [:]
            /// Orders refunded (`orders.refund`), how many times.
            var refunded: [TransactionID: Int] = [:]
            var tokenRequests = 0
            var requests: [String] = []
            /// Voided purchases, in the order Google recorded them voided.
            var voided: [Voided] = []
            var voidedPageSize = 1000
        }

        /// One voided purchase: a one-time product's, or a subscription's order (`order`); `quantity`: a quantity-based
        /// partial refund's units.
        struct Voided {
            var token: PurchaseToken
            var at: Date
            var reason: Int
            var source: Int
            var order: TransactionID? = nil
            var quantity: Int? = nil
        }

        let books: Mutex<Books>
        let faults = Mutex(Faults())
        init(_ purchases: [PurchaseToken: Purchase]) { books = Mutex(Books(purchases: purchases)) }
    }

    public var baseURL: URL { URL(string: "http://127.0.0.1:\(server.port)")! }
    public var tokenURL: URL { baseURL.appendingPathComponent("token") }

    /// `purchases` by purchase token (tokens, packages and products are matched by their bytes, as Google does); access
    /// tokens are valid for `tokenLifetime`.
    public init(purchases: [PurchaseToken: Purchase], tokenLifetime: Duration = .seconds(3600), configuration: HTTPServer.Configuration = .init()) throws {
        let registry = Registry(purchases)
        let key = try PrivateKey.generateRSA()
        let publicKey = try key.publicKey()
        state = registry
        serviceAccountKey = key
        let email = serviceAccountEmail
        // The token endpoint checks `aud` against its own URL, which is known once the server listens.
        let port = Mutex<Int>(0)
        server = try HTTPServer(configuration: configuration, synchronousHandler: { request in
            registry.books.withLock { $0.requests.append("\(request.method) \(request.path)") }
            if request.path == "/token" {
                let audience = "http://127.0.0.1:\(port.withLock { $0 })/token"
                return Self.token(request, registry: registry, publicKey: publicKey, email: email, audience: audience, lifetime: tokenLifetime)
            }
            return Self.api(request, registry: registry)
        })
        port.withLock { $0 = Int(server.port) }
    }

    /// The service account's key file, as the Google Cloud console downloads it.
    public func serviceAccountKeyJSON() throws -> String {
        let fields: [String: JSONValue] = [
            "type": .string("service_account"), "project_id": .string("stand-in-project"), "private_key_id": .string("stand-in-key-1"),
            "private_key": .string(try serviceAccountKey.pemRepresentation()), "client_email": .string(serviceAccountEmail),
            "client_id": .string("100000000000000000001"), "token_uri": .string(tokenURL.absoluteString),
        ]
        return JSONValue.object(fields).serializedText
    }

    /// Writes the key file to a new file in a temporary directory: its path.
    public func writeServiceAccountKeyFile() throws -> String {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("service-account-\(UUID().uuidString).json")
        try Data(try serviceAccountKeyJSON().utf8).write(to: url)
        return url.path
    }

    /// Adds or changes the purchase of `token` (a pending payment settles, the app consumed it).
    public func set(_ token: PurchaseToken, _ purchase: Purchase) { state.books.withLock { $0.purchases[token] = purchase } }
    public func purchase(_ token: PurchaseToken) -> Purchase? { state.books.withLock { $0.purchases[token] } }
    /// The token is no longer valid from now on: 410 for it.
    public func invalidate(_ token: PurchaseToken) { _ = state.books.withLock { $0.invalid.insert(token) } }
    /// `token` is not well-formed from now on: every call about it is answered 400 `Invalid Value`, reason `invalid`.
    public func malform(_ token: PurchaseToken) { _ = state.books.withLock { $0.malformed.insert(token) } }
    /// Every access token issued so far is expired from now on: API requests with them get 401.
    public func expireTokens() { state.books.withLock { $0.accessTokens.removeAll() } }
    /// Successful acknowledges of `token`.
    public func acknowledgeCount(_ token: PurchaseToken) -> Int { state.books.withLock { $0.acknowledged[token, default: 0] } }
    /// Successful consumes of `token`.
    public func consumeCount(_ token: PurchaseToken) -> Int { state.books.withLock { $0.consumed[token, default: 0] } }
    /// Requests to the token endpoint, answered or refused.
    public var tokenRequests: Int { state.books.withLock { $0.tokenRequests } }
    /// Every request, `METHOD path`, in order.
    public var requests: [String] { state.books.withLock { $0.requests } }

    /// Adds or changes the subscription of `token` (it renews, is canceled, expires).
    public func set(_ token: PurchaseToken, _ subscription: Subscription) { state.books.withLock { $0.subscriptions[token] = subscription } }
    public func subscription(_ token: PurchaseToken) -> Subscription? { state.books.withLock { $0.subscriptions[token] } }
    /// Successful acknowledges of the subscription of `token`.
    public func subscriptionAcknowledgeCount(_ token: PurchaseToken) -> Int { state.books.withLock { $0.acknowledgedSubscriptions[token, default: 0] } }

    /// How many times `order` was refunded through `orders.refund`.
    public func refundCount(_ order: TransactionID) -> Int { state.books.withLock { $0.refunded[order, default: 0] } }

    /// Google voids the purchase of `token` at `at` (a refund, `reason` 1 remorse, 7 chargeback, …; `source` 0 the user,
    /// 1 the developer, 2 Google): it is canceled and listed among the voided purchases.
    public func void(_ token: PurchaseToken, at: Date = Date(), reason: Int = 1, source: Int = 0) {
        state.books.withLock { books in
            books.purchases[token]?.purchaseState = 1
            books.voided.append(.init(token: token, at: at, reason: reason, source: source))
        }
    }

    /// Google refunds `quantity` units of the multi-quantity purchase of `token` at `at` (a quantity-based partial refund):
    /// the purchase stays purchased, and the refund is listed with its `voidedQuantity`.
    public func voidPartially(_ token: PurchaseToken, quantity: Int, at: Date = Date(), reason: Int = 1, source: Int = 0) {
        state.books.withLock { $0.voided.append(.init(token: token, at: at, reason: reason, source: source, quantity: quantity)) }
    }

    /// Google voids the subscription order `order` of `token` at `at` (a refund of that period, revoked): the subscription
    /// expires now, and the order is listed among the voided purchases (`type=1` only).
    public func voidSubscription(_ token: PurchaseToken, order: TransactionID, at: Date = Date(), reason: Int = 1, source: Int = 0) {
        state.books.withLock { books in
            books.subscriptions[token]?.state = "SUBSCRIPTION_STATE_EXPIRED"
            books.subscriptions[token]?.expiryTime = at
            books.voided.append(.init(token: token, at: at, reason: reason, source: source, order: order))
        }
    }

    /// At most this many voided purchases a page (Google: 1,000).
    public func setVoidedPageSize(_ size: Int) { state.books.withLock { $0.voidedPageSize = max(1, size) } }

    /// Answers API requests for `token` (nil: every API request, the API down) with `status` from now on, with
    /// `Retry-After: retryAfter` (seconds) when given; nil status: as documented again.
    public func fail(_ status: Int?, token: PurchaseToken? = nil, retryAfter: Int? = nil) {
        state.faults.withLock { faults in
            let fault = status.map { (status: $0, retryAfter: retryAfter) }
            if let token { faults.byToken[token] = fault } else { faults.all = fault }
        }
    }

    /// Answers the token endpoint with `status` from now on (400: `invalid_grant`); nil: as documented again.
    public func failTokenEndpoint(_ status: Int?) { state.faults.withLock { $0.tokenEndpoint = status } }

    /// Holds each request to the token endpoint for `duration` before answering it (a slow token endpoint); nil: no more.
    public func stallTokenEndpoint(for duration: Duration?) { state.faults.withLock { $0.tokenStall = duration } }

    /// Holds each API request for `token` for `duration` before answering it (a hung API).
    public func stall(_ token: PurchaseToken, for duration: Duration) { state.faults.withLock { $0.stalls[token] = duration } }
}

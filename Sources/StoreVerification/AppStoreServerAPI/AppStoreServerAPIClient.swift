import PurchaseDomain
import Crypto
import Foundation
import HTTPClient
import JSON
import Synchronization

/// Calls the App Store Server API, authenticated with an ES256 JWT signed by the developer's In-App
/// Purchase key (header `alg`, `kid`, `typ`; claims `iss`, `iat`, `exp`, `aud: appstoreconnect-v1`, `bid`).
public final class AppStoreServerAPIClient: Sendable {
    public struct Configuration: Sendable {
        public var baseURL: URL
        public var keyId: String
        public var issuerId: String
        public var bundleId: BundleID
        public var privateKey: PrivateKey
        /// Token lifetime; Apple accepts at most one hour.
        public var tokenLifetime: TimeInterval
        public var timeout: Duration
        /// Told the outcome of every call to the API; nil: nobody is.
        public var observer: StoreAPIObserver?

        public static let productionURL = URL(string: "https://api.storekit.apple.com")!
        public static let sandboxURL = URL(string: "https://api.storekit-sandbox.apple.com")!

        public init(baseURL: URL, keyId: String, issuerId: String, bundleId: BundleID, privateKey: PrivateKey,
                    tokenLifetime: TimeInterval = 300, timeout: Duration = .seconds(10), observer: StoreAPIObserver? = nil) {
            self.baseURL = baseURL
            self.keyId = keyId
            self.issuerId = issuerId
            self.bundleId = bundleId
            self.privateKey = privateKey
            self.tokenLifetime = min(tokenLifetime, 3600)
            self.timeout = timeout
            self.observer = observer
        }
    }

    /// Retry later (timeout, 429, 5xx, an authentication problem an operator must fix), or refused for this transaction
    /// (e.g. an unknown transaction id): the store clients' one failure.
    public typealias Failure = StoreAPIFailure

    public let configuration: Configuration
    private let http: StoreAPISession
    /// `baseURL` with one trailing slash, to which a request's path is appended (Foundation's `URL` appending cost
    /// the finisher 2.5 % of its CPU per call).
    private let urlPrefix: String
    private let now: @Sendable () -> Date
    /// The token in use and when to replace it (signing one per request cost the finisher ~7 % of its CPU).
    private let cachedToken = Mutex<(token: String, renewAt: Date)?>(nil)

    public init(configuration: Configuration, now: @escaping @Sendable () -> Date = Date.init) {
        self.configuration = configuration
        self.now = now
        let base = configuration.baseURL.absoluteString
        urlPrefix = base.hasSuffix("/") ? base : base + "/"
        http = StoreAPISession(timeout: configuration.timeout, observer: configuration.observer, now: now)
    }

    /// `POST /inApps/v1/transactions/{transactionId}/finish`: tells the App Store the purchase was delivered.
    public func finishTransaction(_ transactionId: TransactionID) async -> Result<Void, Failure> {
        await send("POST", path: Self.finishPath, transactionId: transactionId, body: nil)
    }

    /// Finish Transaction for each of `transactionIds`, at most as many at once as the client has connections; the
    /// answers in their order, returned once all are in.
    public func finishTransactions(_ transactionIds: [TransactionID]) async -> [Result<Void, Failure>] {
        let headers = headers(body: nil) // One token for the batch.
        let requests = transactionIds.map { request("POST", path: Self.finishPath, transactionId: $0, body: nil, headers: headers) }
        // Only the requests that could be made are sent; the others keep their failure in `requests`.
        let sent = requests.compactMap { request -> HTTPClient.Request? in
            guard case .success(let made) = request else { return nil }
            return made
        }
        var answers = (await http.send(all: sent)).makeIterator()
        return requests.map { request in
            request.flatMap { _ in answers.next().map { outcome($0).map { _ in } } ?? .failure(.unavailable("App Store Server API: no answer")) }
        }
    }

    private static func finishPath(_ transactionId: TransactionID) -> String { "inApps/v1/transactions/\(transactionId)/finish" }

    /// `PUT /inApps/v2/transactions/consumption/{transactionId}` (*Send Consumption Information*): answers a
    /// `CONSUMPTION_REQUEST` with what the customer received; 202 Accepted on success. Send it only with the
    /// customer's consent (`customerConsented` must be true) and within 12 hours of the request.
    public func sendConsumptionInformation(_ transactionId: TransactionID, _ consumption: ConsumptionRequest) async -> Result<Void, Failure> {
        guard consumption.customerConsented else {
            return .failure(.refused(status: 0, detail: "no consumption information is sent without the customer's consent"))
        }
        if let percentage = consumption.consumptionPercentage {
            guard (0...100_000).contains(percentage), consumption.deliveryStatus == .delivered || percentage == 0 else {
                return .failure(.refused(status: 0, detail: "consumptionPercentage must be 0…100000, and 0 unless delivered"))
            }
        }
        return await send("PUT", path: { "inApps/v2/transactions/consumption/\($0)" }, transactionId: transactionId, body: consumption.jsonBody())
    }

    /// One authenticated call for a transaction, to `path(transactionId)`.
    private func send(_ method: String, path: (TransactionID) -> String, transactionId: TransactionID, body: Data?) async -> Result<Void, Failure> {
        switch request(method, path: path, transactionId: transactionId, body: body, headers: headers(body: body)) {
        case .success(let request): outcome(await http.send(request)).map { _ in }
        case .failure(let failure): .failure(failure)
        }
    }

    /// One authenticated call to `pathAndQuery` (below the base URL): the answer's body when it succeeded.
    func call(_ method: String, _ pathAndQuery: String, body: Data?) async -> Result<[UInt8], Failure> {
        switch headers(body: body) {
        case .success(let headers):
            outcome(await http.send(HTTPClient.Request(method: method, url: urlPrefix + pathAndQuery, headers: headers, body: body.map(Array.init))))
        case .failure(let failure): .failure(failure)
        }
    }

    /// One authenticated `GET` of `pathAndQuery(transactionId)` (below the base URL): the answer's body when it succeeded;
    /// refused without a request when the transaction id cannot be sent.
    func get(for transactionId: TransactionID, _ pathAndQuery: (TransactionID) -> String) async -> Result<[UInt8], Failure> {
        if let invalid = Self.invalid(transactionId) { return .failure(invalid) }
        return await call("GET", pathAndQuery(transactionId), body: nil)
    }

    /// The headers of calls made now: the API token, and the body's type when there is one. Every call asks for them
    /// first: while a wait the API asked for runs (`Retry-After`), none is made, whichever endpoint it is for.
    private func headers(body: Data?) -> Result<[(name: String, value: String)], Failure> {
        if let held = http.holdsCalls("App Store Server API") { return .failure(held) }
        var headers: [(name: String, value: String)] = []
        do {
            headers.append(("Authorization", "Bearer \(try currentToken())"))
        } catch {
            return .failure(.unavailable("cannot sign the API token: \(error)"))
        }
        if body != nil { headers.append(("Content-Type", "application/json")) }
        return .success(headers)
    }

    /// The request of a call for a transaction, or why none can be made (an invalid transaction id, no token).
    private func request(_ method: String, path: (TransactionID) -> String, transactionId: TransactionID, body: Data?,
                         headers: Result<[(name: String, value: String)], Failure>) -> Result<HTTPClient.Request, Failure> {
        if let invalid = Self.invalid(transactionId) { return .failure(invalid) }
        return headers.map { HTTPClient.Request(method: method, url: urlPrefix + path(transactionId), headers: $0, body: body.map(Array.init)) }
    }

    /// Why `transactionId` cannot be sent in a path (it must be 1 to 64 ASCII letters and digits), or nil when it can.
    static func invalid(_ transactionId: TransactionID) -> Failure? {
        let id = transactionId.rawValue.utf8
        guard !id.isEmpty, id.count <= 64,
              id.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }) else {
            return .refused(status: 0, detail: "invalid transaction id")
        }
        return nil
    }

    /// What an answer means: 2xx is success (its body); what may pass (network, 401/403 — an operator must fix the key —,
    /// 429, 5xx) is `unavailable`; the rest is `refused` with Apple's `errorCode` and `errorMessage`.
    private func outcome(_ answer: Result<HTTPClient.Response, HTTPClient.Failure>) -> Result<[UInt8], Failure> {
        let response: HTTPClient.Response
        switch answer {
        case .success(let answered): response = answered
        case .failure(let failure): return .failure(.unavailable("App Store Server API: \(failure)"))
        }
        switch response.status {
        case 200...299: return .success(response.body)
        case 401, 403, 408, 429, 500...599, 0:
            return .failure(.unavailable("App Store Server API answered HTTP \(response.status)", retryAfter: Self.wait(response.retryAfter, now: now())))
        default:
            let error = JSONValue.parse(response.body)?.objectValue
            var detail = error?["errorMessage"]?.stringValue ?? "HTTP \(response.status)"
            if let code = error?["errorCode"]?.int64Value { detail += " (errorCode \(code))" }
            return .failure(.refused(status: response.status, detail: detail))
        }
    }

    /// How long to wait before calling again, from `Retry-After` (`StoreAPISession.wait`).
    public static func wait(_ retryAfter: Duration?, now: Date) -> Duration? { StoreAPISession.wait(retryAfter, now: now) }

    /// The longest wait a `Retry-After` is taken for: Apple's rate limits are per hour.
    public static let longestWait: Duration = StoreAPISession.longestWait

    /// The token for a request: reused until half its lifetime has passed (Apple accepts a token for
    /// many requests within its lifetime), so a clock step or a slow request never sends an expired one.
    func currentToken() throws -> String {
        let date = now()
        if let cached = cachedToken.withLock({ $0 }), date < cached.renewAt, date >= cached.renewAt.addingTimeInterval(-configuration.tokenLifetime / 2) {
            return cached.token
        }
        let token = try token(issuedAt: date)
        cachedToken.withLock { $0 = (token, date.addingTimeInterval(configuration.tokenLifetime / 2)) }
        return token
    }

    /// A fresh API token.
    public func token() throws -> String { try token(issuedAt: now()) }

    private func token(issuedAt date: Date) throws -> String {
        let issued = Int64(date.timeIntervalSince1970)
        let header: [String: JSONValue] = ["alg": .string("ES256"), "kid": .string(configuration.keyId), "typ": .string("JWT")]
        let claims: [String: JSONValue] = [
            "iss": .string(configuration.issuerId), "iat": .integer(issued), "exp": .integer(issued + Int64(configuration.tokenLifetime)),
            "aud": .string("appstoreconnect-v1"), "bid": .string(configuration.bundleId.rawValue),
        ]
        let input = Base64URL.encode(Data(JSONValue.object(header).serialized)) + "." + Base64URL.encode(Data(JSONValue.object(claims).serialized))
        return input + "." + Base64URL.encode(try configuration.privateKey.signES256(Data(input.utf8)))
    }
}

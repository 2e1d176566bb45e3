import Foundation
import HTTPClient
import JSON
import PurchaseDomain

/// Calls the Stripe API (`https://api.stripe.com/v1/…`) with the account's secret key (`Authorization: Bearer sk_…`):
/// reads with `GET` and query parameters, writes with `POST` of a form-encoded body (`application/x-www-form-urlencoded`),
/// each write with an `Idempotency-Key` the caller keeps for the operation, so that a retry after a lost answer gets
/// Stripe's saved answer rather than a second refund. Answers are JSON objects; errors Stripe's
/// `{"error":{"type","code","message","param"}}`.
///
/// What an answer means (`Failure`, `StoreAPIFailure`): the network, 409 (a request with the same idempotency key under
/// way), 429 (Stripe's rate limit), 5xx and 401 or 403 (the key's, which an operator must fix) may pass (`unavailable`,
/// not before `Retry-After` when Stripe gives one, which holds every call meanwhile); 404, 400 and any other 4xx are
/// `refused`.
public final class StripeAPIClient: Sendable {
    public struct Configuration: Sendable {
        public var baseURL: URL
        /// The account's secret (`sk_live_…`, `sk_test_…`) or restricted (`rk_…`) key.
        public var secretKey: String
        /// Sent as `Stripe-Version` when set; nil: the account's default version. Objects are read in the shapes of the
        /// versions before and after 2025-03-31 (basil) either way.
        public var apiVersion: String?
        public var timeout: Duration
        /// Told the outcome of every call to the API; nil: nobody is.
        public var observer: StoreAPIObserver?

        public static let defaultBaseURL = URL(string: "https://api.stripe.com")!

        public init(baseURL: URL = defaultBaseURL, secretKey: String, apiVersion: String? = nil, timeout: Duration = .seconds(10),
                    observer: StoreAPIObserver? = nil) {
            self.baseURL = baseURL
            self.secretKey = secretKey
            self.apiVersion = apiVersion
            self.timeout = timeout
            self.observer = observer
        }
    }

    /// Why a call has no answer to use: the same two outcomes as every store client's. The network, a timeout, 409 (a
    /// request with the same idempotency key under way), 429, 5xx, and 401 or 403 (the key: wrong, revoked, or without
    /// the permission, which an operator must fix) are `unavailable`, not before `Retry-After`; 404 and any other 4xx
    /// are `refused` with their status.
    public typealias Failure = StoreAPIFailure

    public let configuration: Configuration
    private let http: StoreAPISession
    /// `{base}/v1/`.
    let apiURL: String

    public init(configuration: Configuration) {
        self.configuration = configuration
        let base = configuration.baseURL.absoluteString
        apiURL = (base.hasSuffix("/") ? base : base + "/") + "v1/"
        http = StoreAPISession(timeout: configuration.timeout, observer: configuration.observer)
    }

    /// `GET /v1/{path}?{query}`: the answer's object. `path`'s segments must be ids (`isStripeID`) or literal names.
    public func get(_ path: String, query: [(name: String, value: String)] = []) async -> Result<[String: JSONValue], Failure> {
        let encoded = Self.formEncoded(query)
        return await send(HTTPClient.Request(method: "GET", url: apiURL + path + (encoded.isEmpty ? "" : "?" + encoded), headers: headers()))
    }

    /// `POST /v1/{path}` with `form` as the body, under `idempotencyKey` (at most 255 characters, Stripe keeps it at least
    /// 24 hours): the same key and parameters again answer what the first request was answered; the same key with other
    /// parameters is refused (400, `idempotency_error`).
    public func post(_ path: String, form: [(name: String, value: String)], idempotencyKey: String) async -> Result<[String: JSONValue], Failure> {
        guard !idempotencyKey.isEmpty, idempotencyKey.utf8.count <= 255, idempotencyKey.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            return .failure(.refused(status: 0, detail: "an idempotency key must be 1 to 255 visible ASCII characters"))
        }
        var headers = headers()
        headers.append(("Content-Type", "application/x-www-form-urlencoded"))
        headers.append(("Idempotency-Key", idempotencyKey))
        return await send(HTTPClient.Request(method: "POST", url: apiURL + path, headers: headers, body: Array(Self.formEncoded(form).utf8)))
    }

    /// `POST /v1/refunds`: refunds `amount` (minor units; nil: all that is left) of the payment intent's charge, under
    /// `idempotencyKey` (one per refund the pipeline decides, kept with it: a retry refunds once). The refund object.
    public func refund(paymentIntent: String, amount: Int64? = nil, idempotencyKey: String) async -> Result<[String: JSONValue], Failure> {
        guard Self.isStripeID(paymentIntent) else { return .failure(.refused(status: 0, detail: "not a payment intent id")) }
        var form: [(name: String, value: String)] = [("payment_intent", paymentIntent)]
        if let amount { form.append(("amount", String(amount))) }
        return await post("refunds", form: form, idempotencyKey: idempotencyKey)
    }

    private func headers() -> [(name: String, value: String)] {
        var headers: [(name: String, value: String)] = [("Authorization", "Bearer " + configuration.secretKey), ("Accept", "application/json")]
        if let version = configuration.apiVersion { headers.append(("Stripe-Version", version)) }
        return headers
    }

    private func send(_ request: HTTPClient.Request) async -> Result<[String: JSONValue], Failure> {
        // A wait Stripe asked for holds every call of the API, not only the one it answered.
        if let held = http.holdsCalls("Stripe API") { return .failure(held) }
        switch await http.send(request) {
        case .success(let response): return Self.outcome(response)
        case .failure(let failure): return .failure(.unavailable("Stripe API: \(failure)"))
        }
    }

    /// What an answer means (see the type's description).
    static func outcome(_ response: HTTPClient.Response) -> Result<[String: JSONValue], Failure> {
        let error = JSONValue.parse(response.body)?.objectValue?["error"]?.objectValue
        let message = [error?["type"]?.stringValue, error?["code"]?.stringValue, error?["message"]?.stringValue.map { String($0.prefix(300)) }]
            .compactMap { $0 }.joined(separator: ": ")
        let detail = "HTTP \(response.status)" + (message.isEmpty ? "" : ": " + message)
        switch response.status {
        case 200...299:
            guard let object = JSONValue.parse(response.body)?.objectValue else { return .failure(.unavailable("Stripe API: an answer that is not a JSON object")) }
            return .success(object)
        case 401, 403: return .failure(.unavailable("Stripe refused the secret key (\(detail)): an operator must fix the key or its permissions"))
        case 409, 429, 500...599, 0:
            return .failure(.unavailable("Stripe API answered \(detail)", retryAfter: StoreAPISession.wait(response.retryAfter, now: Date())))
        case 400...499: return .failure(.refused(status: response.status, detail: detail))
        default: return .failure(.unavailable("Stripe API answered \(detail)"))
        }
    }

    /// `application/x-www-form-urlencoded` text of `pairs` in their order (also a URL's query): names and values
    /// percent-encoded but for RFC 3986's unreserved characters, so `expand[]` is sent `expand%5B%5D`.
    static func formEncoded(_ pairs: [(name: String, value: String)]) -> String {
        pairs.map { percentEncoded($0.name) + "=" + percentEncoded($0.value) }.joined(separator: "&")
    }

    static func percentEncoded(_ text: String) -> String {
        // Only what cannot be percent-encoded (a lone surrogate, which a Swift String cannot hold) fails: never here.
        text.addingPercentEncoding(withAllowedCharacters: .urlUnreserved) ?? ""
    }

    /// Whether `text` has the shape of a Stripe object id (`cs_test_a1…`, `evt_1N…`, `li_…`): 1 to 255 ASCII letters,
    /// digits and underscores. Only such ids are put in a request's path: nothing else can name another path.
    public static func isStripeID(_ text: String) -> Bool {
        let bytes = text.utf8
        return !bytes.isEmpty && bytes.count <= 255 && bytes.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || byte == 0x5F
        }
    }
}

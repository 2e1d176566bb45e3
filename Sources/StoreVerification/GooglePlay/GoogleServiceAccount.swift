import Crypto
import Foundation
import HTTPClient
import JSON
import Synchronization

/// A Google Cloud service account, as its JSON key file describes it, and the OAuth 2.0 access tokens it obtains for the
/// Android Publisher API: an RS256 JWT assertion (`iss` the account's e-mail, `scope` androidpublisher, `aud` the key
/// file's `token_uri`, an hour's lifetime) exchanged at `token_uri` (grant type `jwt-bearer`). A token is reused until
/// five minutes before it expires, and dropped when the API answers `401` with it. One exchange at a time: calls that
/// need a token while one is being obtained wait for that one (single flight), so that a burst of calls at start or at
/// renewal makes one request to the token endpoint, not one each.
public final class GoogleServiceAccount: Sendable {
    /// The OAuth scope of the Android Publisher API.
    public static let scope = "https://www.googleapis.com/auth/androidpublisher"

    public let clientEmail: String
    public let tokenURL: URL
    private let privateKeyId: String?
    private let privateKey: PrivateKey
    private let http: StoreAPISession
    private let now: @Sendable () -> Date
    /// The token and when to renew it, and the exchange under way, if any, that every caller waits for.
    private let state = Mutex<(cached: (token: String, renewAt: Date)?, inFlight: Task<Result<String, AndroidPublisherClient.Failure>, Never>?)>((nil, nil))

    /// - Parameter keyFile: the key file's bytes (`"type": "service_account"`, `client_email`, `private_key`, `token_uri`).
    /// - Parameter observer: told the outcome of every call to the token endpoint; nil: nobody is.
    /// - Throws: `GooglePlayConfigurationError` naming the field that is missing or unusable.
    public init(keyFile: Data, now: @escaping @Sendable () -> Date = Date.init, timeout: Duration = .seconds(10),
                observer: StoreAPIObserver? = nil) throws {
        guard let object = JSONValue.parse(Array(keyFile))?.objectValue else {
            throw GooglePlayConfigurationError("the service account key file is not a JSON object")
        }
        let fields = JSONFields(object: object)
        guard fields.string("type") == "service_account" else {
            throw GooglePlayConfigurationError("the key file's \"type\" is not \"service_account\"")
        }
        guard let email = fields.string("client_email"), !email.isEmpty else { throw GooglePlayConfigurationError("the key file has no \"client_email\"") }
        guard let pem = fields.string("private_key") else { throw GooglePlayConfigurationError("the key file has no \"private_key\"") }
        do { privateKey = try PrivateKey(rsaPEM: Data(pem.utf8)) } catch {
            throw GooglePlayConfigurationError("the key file's \"private_key\": \(error)")
        }
        guard let uri = fields.string("token_uri"), let url = URL(string: uri), url.scheme == "https" || url.scheme == "http", url.host != nil else {
            throw GooglePlayConfigurationError("the key file's \"token_uri\" is not a URL")
        }
        clientEmail = email
        tokenURL = url
        privateKeyId = fields.string("private_key_id")
        self.now = now
        http = StoreAPISession(timeout: timeout, observer: observer)
    }

    /// A current access token: the cached one, or one just obtained (by this call, or by the one already obtaining it).
    public func accessToken() async -> Result<String, AndroidPublisherClient.Failure> {
        let date = now()
        let next: Next = state.withLock { state in
            if let cached = state.cached, date < cached.renewAt { return .cached(cached.token) }
            if let inFlight = state.inFlight { return .wait(inFlight) }
            // Started under the lock; it takes the lock again only once done, to leave its token and make way.
            let exchange = Task { await self.exchange(at: date) }
            state.inFlight = exchange
            return .wait(exchange)
        }
        switch next {
        case .cached(let token): return .success(token)
        case .wait(let exchange): return await exchange.value
        }
    }

    private enum Next {
        case cached(String)
        case wait(Task<Result<String, AndroidPublisherClient.Failure>, Never>)
    }

    /// One exchange of an assertion for an access token at the token endpoint; what it obtained is cached for the others.
    private func exchange(at date: Date) async -> Result<String, AndroidPublisherClient.Failure> {
        let answer = await requestToken(at: date)
        state.withLock { state in
            state.inFlight = nil
            if case .success(let obtained) = answer { state.cached = obtained }
        }
        return answer.map(\.token)
    }

    private func requestToken(at date: Date) async -> Result<(token: String, renewAt: Date), AndroidPublisherClient.Failure> {
        let assertion: String
        do { assertion = try self.assertion(issuedAt: date) } catch {
            return .failure(.unavailable("cannot sign the service account's assertion: \(error)"))
        }
        let body = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + assertion
        let request = HTTPClient.Request(method: "POST", url: tokenURL.absoluteString,
                                         headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")],
                                         body: Array(body.utf8))
        let response: HTTPClient.Response
        switch await http.send(request) {
        case .success(let answered): response = answered
        case .failure(let failure): return .failure(.unavailable("Google OAuth token endpoint: \(failure)"))
        }
        let answer = JSONValue.parse(response.body)?.objectValue.map(JSONFields.init)
        guard response.status == 200 else {
            // 400 invalid_grant (a revoked key, a clock far off) needs an operator; 429 and 5xx pass. Either way the
            // purchase waits: retried, then parked, never refused for the pipeline's own credentials.
            let why = [answer?.string("error"), answer?.string("error_description")].compactMap { $0 }.joined(separator: ": ")
            return .failure(.unavailable("Google OAuth token endpoint answered HTTP \(response.status)\(why.isEmpty ? "" : " (\(why))")",
                                         retryAfter: StoreAPISession.wait(response.retryAfter, now: date)))
        }
        guard let token = answer?.string("access_token"), !token.isEmpty, let expiresIn = answer?.int64("expires_in"), expiresIn > 0 else {
            return .failure(.unavailable("Google OAuth token endpoint: an answer without access_token and expires_in"))
        }
        // Renewed five minutes before it expires (halfway through a shorter lifetime): never sent expired.
        let margin = min(Self.renewalMargin, Double(expiresIn) / 2)
        return .success((token, date.addingTimeInterval(Double(expiresIn) - margin)))
    }

    /// How long before an access token expires it is renewed.
    public static let renewalMargin: TimeInterval = 300

    /// Forgets `token` (the API refused it): the next call obtains a new one. A newer token already cached stays.
    public func invalidate(_ token: String) {
        state.withLock { if $0.cached?.token == token { $0.cached = nil } }
    }

    /// The signed JWT the token endpoint exchanges for an access token.
    func assertion(issuedAt date: Date) throws -> String {
        let issued = Int64(date.timeIntervalSince1970)
        var header: [String: JSONValue] = ["alg": .string("RS256"), "typ": .string("JWT")]
        if let privateKeyId { header["kid"] = .string(privateKeyId) }
        let claims: [String: JSONValue] = [
            "iss": .string(clientEmail), "scope": .string(Self.scope), "aud": .string(tokenURL.absoluteString),
            "iat": .integer(issued), "exp": .integer(issued + 3600),
        ]
        let input = Base64URL.encode(Data(JSONValue.object(header).serialized)) + "." + Base64URL.encode(Data(JSONValue.object(claims).serialized))
        return input + "." + Base64URL.encode(try privateKey.signRSA(Data(input.utf8), digest: .sha256))
    }
}

/// A Google Play setting or key file that cannot be used.
public struct GooglePlayConfigurationError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

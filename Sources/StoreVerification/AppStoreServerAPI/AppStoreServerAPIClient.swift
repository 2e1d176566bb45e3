import Crypto
import Foundation
import JSON
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Calls the App Store Server API, authenticated with an ES256 JWT signed by the developer's In-App
/// Purchase key (header `alg`, `kid`, `typ`; claims `iss`, `iat`, `exp`, `aud: appstoreconnect-v1`, `bid`).
public final class AppStoreServerAPIClient: Sendable {
    public struct Configuration: Sendable {
        public var baseURL: URL
        public var keyId: String
        public var issuerId: String
        public var bundleId: String
        public var privateKey: PrivateKey
        /// Token lifetime; Apple accepts at most one hour.
        public var tokenLifetime: TimeInterval
        public var timeout: Duration

        public static let productionURL = URL(string: "https://api.storekit.apple.com")!
        public static let sandboxURL = URL(string: "https://api.storekit-sandbox.apple.com")!

        public init(baseURL: URL, keyId: String, issuerId: String, bundleId: String, privateKey: PrivateKey,
                    tokenLifetime: TimeInterval = 300, timeout: Duration = .seconds(10)) {
            self.baseURL = baseURL
            self.keyId = keyId
            self.issuerId = issuerId
            self.bundleId = bundleId
            self.privateKey = privateKey
            self.tokenLifetime = min(tokenLifetime, 3600)
            self.timeout = timeout
        }
    }

    public enum Failure: Error, Sendable, Equatable {
        /// Retry later: timeout, 429, 5xx, or an authentication problem an operator must fix.
        case unavailable(String)
        /// The API refused the request for this transaction (e.g. unknown transaction id).
        case refused(status: Int, detail: String)
    }

    public let configuration: Configuration
    private let session: URLSession
    private let now: @Sendable () -> Date
    /// The token in use and when to replace it (signing one per request cost the finisher ~7 % of its CPU).
    private let cachedToken = Mutex<(token: String, renewAt: Date)?>(nil)

    public init(configuration: Configuration, now: @escaping @Sendable () -> Date = Date.init) {
        self.configuration = configuration
        self.now = now
        let sessionConfiguration = URLSessionConfiguration.ephemeral
        sessionConfiguration.timeoutIntervalForRequest = configuration.timeout.seconds
        session = URLSession(configuration: sessionConfiguration)
    }

    /// `POST /inApps/v1/transactions/{transactionId}/finish`: tells the App Store the purchase was delivered.
    public func finishTransaction(_ transactionId: String) async -> Result<Void, Failure> {
        guard !transactionId.isEmpty, transactionId.allSatisfy({ $0.isNumber || $0.isLetter }) else {
            return .failure(.refused(status: 0, detail: "invalid transaction id"))
        }
        let url = configuration.baseURL.appendingPathComponent("inApps/v1/transactions/\(transactionId)/finish")
        var request = URLRequest(url: url, timeoutInterval: configuration.timeout.seconds)
        request.httpMethod = "POST"
        do {
            request.setValue("Bearer \(try currentToken())", forHTTPHeaderField: "Authorization")
        } catch {
            return .failure(.unavailable("cannot sign the API token: \(error)"))
        }
        let status: Int
        let body: Data
        do {
            let (data, response) = try await session.data(for: request)
            status = (response as? HTTPURLResponse)?.statusCode ?? 0
            body = data
        } catch {
            return .failure(.unavailable("App Store Server API: \(error.localizedDescription)"))
        }
        switch status {
        case 200...299: return .success(())
        case 401, 403, 429, 500...599, 0:
            return .failure(.unavailable("App Store Server API answered HTTP \(status)"))
        default:
            let detail = JSONValue.parse(Array(body))?.objectValue?["errorMessage"]?.stringValue ?? "HTTP \(status)"
            return .failure(.refused(status: status, detail: detail))
        }
    }

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
            "aud": .string("appstoreconnect-v1"), "bid": .string(configuration.bundleId),
        ]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let input = Base64URL.encode(try encoder.encode(JSONValue.object(header))) + "." + Base64URL.encode(try encoder.encode(JSONValue.object(claims)))
        return input + "." + Base64URL.encode(try configuration.privateKey.signES256(Data(input.utf8)))
    }
}

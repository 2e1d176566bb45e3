import Crypto
import Foundation
import PurchaseDomain
import HTTPServer
import JSON
import Synchronization

/// The App Store Server API as tests and the harness play it, over real HTTP with kept-alive connections: every
/// request must carry a bearer token that the developer key signed (ES256) with the claims Apple documents (`kid`,
/// `aud: appstoreconnect-v1`, `bid`, `iss`, at most an hour between `iat` and `exp`), else 401.
/// - `POST /inApps/v1/transactions/{transactionId}/finish` → 200, recorded with the time it arrived.
/// - `PUT /inApps/v2/transactions/consumption/{transactionId}` with a `ConsumptionRequest` checked as Apple
///   documents it → 202, recorded; else 400 with Apple's `errorCode` (none when malformed).
/// - Notification history and test notifications: see `AppStoreServerAPIStandIn+Notifications`.
/// - Transaction info and history, refund history, subscription statuses: see `AppStoreServerAPIStandIn+Transactions`.
/// Errors are injected on demand (`fail`): authenticated requests are then answered with that status and Apple's
/// error code for it, and `Retry-After` when given.
public final class AppStoreServerAPIStandIn: Sendable {
    public let server: HTTPServer
    let recorder = Recorder()

    /// What authenticated requests are answered with instead, and how many more times (nil: until `fail(nil)`).
    public struct Failure: Sendable {
        public var status: Int
        public var remaining: Int?
        public var retryAfterSeconds: Int?

        public init(status: Int, times: Int? = nil, retryAfterSeconds: Int? = nil) {
            self.status = status
            remaining = times
            self.retryAfterSeconds = retryAfterSeconds
        }
    }

    struct State {
        var finished: [TransactionID] = []
        var finishTimes: [TransactionID: [Date]] = [:]
        var consumptions: [(transactionId: TransactionID, body: [String: JSONValue])] = []
        var lastClaims: [String: JSONValue] = [:]
        /// Notifications the App Store attempted to send, with when.
        var history: [(signedPayload: String, at: Date)] = []
        var historyPageSize = 20
        /// Where requested test notifications are posted, and how they are signed (by notification UUID).
        var testNotificationTarget: (url: URL, sign: @Sendable (String) throws -> String)?
        /// Test notifications requested, by token: as sent, and each attempt to post it.
        var testNotifications: [String: (signedPayload: String, attempts: [(date: Date, result: String)])] = [:]
        var requests: [String] = []
        var failure: Failure?
        /// Tokens whose signature and claims were checked, with their claims: a client signs one token and sends it
        /// with many requests, and checking it once keeps the stand-in's cost out of what benchmarks measure.
        var acceptedTokens: [Substring: [String: JSONValue]] = [:]
        var transactionRecords = TransactionRecords()
    }

    /// What the server saw; the handler records into it before `self` exists.
    final class Recorder: Sendable {
        private let state = Mutex(State())
        func update<T>(_ body: (inout State) -> T) -> T { state.withLock { body(&$0) } }
        func read<T>(_ body: (State) -> T) -> T { state.withLock { body($0) } }
    }

    public var baseURL: URL { URL(string: "http://127.0.0.1:\(server.port)")! }
    /// Transaction ids finished, in order (a repeated call again).
    public var finished: [TransactionID] { recorder.read(\.finished) }
    /// When each transaction's Finish Transaction calls arrived, by transaction id.
    public var finishTimes: [TransactionID: [Date]] { recorder.read(\.finishTimes) }
    /// Consumption information accepted, in order.
    public var consumptions: [(transactionId: TransactionID, body: [String: JSONValue])] { recorder.read(\.consumptions) }
    /// Every authenticated request, as `METHOD path`, whatever its answer.
    public var requests: [String] { recorder.read(\.requests) }
    /// The claims of the last token accepted.
    public var lastClaims: [String: JSONValue] { recorder.read(\.lastClaims) }

    /// Answers authenticated requests with `failure` from now on (nil: as documented again).
    public func fail(_ failure: Failure?) { recorder.update { $0.failure = failure } }

    /// - Parameters:
    ///   - publicKey, keyId, issuerId, bundleId: the developer key's public half and the claims its tokens must carry.
    ///   - failWith: a status every authenticated request is answered with (as `fail(.init(status:))`).
    public init(publicKey: PublicKey, keyId: String, issuerId: String, bundleId: String, failWith: Int? = nil,
                configuration: HTTPServer.Configuration = .init()) throws {
        let recorder = self.recorder
        recorder.update { $0.failure = failWith.map { Failure(status: $0) } }
        server = try HTTPServer(configuration: configuration, synchronousHandler: { request in
            let token = request.header("authorization").flatMap { $0.hasPrefix("Bearer ") ? $0.dropFirst(7) : nil }
            let known = token.flatMap { token in recorder.read { $0.acceptedTokens[token] } }
            guard let token, let claims = known ?? Self.claims(token, publicKey: publicKey, keyId: keyId, issuerId: issuerId, bundleId: bundleId) else {
                return Self.error(401, 4010000, "Unauthenticated")
            }
            let failure = recorder.update { state -> Failure? in
                if known == nil {
                    if state.acceptedTokens.count >= 64 { state.acceptedTokens.removeAll() } // a client makes a new one an hour at most
                    state.acceptedTokens[token] = claims
                }
                state.lastClaims = claims
                state.requests.append("\(request.method) \(request.path)")
                guard let failure = state.failure else { return nil }
                if let remaining = failure.remaining { state.failure = remaining > 1 ? Failure(status: failure.status, times: remaining - 1,
                                                                                              retryAfterSeconds: failure.retryAfterSeconds) : nil }
                return failure
            }
            if let failure { return Self.answer(failure) }
            let path = request.path.split(separator: "/").map(String.init)
            if let answer = Self.notificationRoutes(request, path, recorder) { return answer }
            if let answer = Self.orderRoutes(request, path, recorder) { return answer }
            if let answer = Self.transactionRoutes(request, path, recorder, bundleId: bundleId) { return answer }
            if request.method == "PUT", path.count == 5, path[0] == "inApps", path[1] == "v2", path[2] == "transactions", path[3] == "consumption" {
                let (status, errorCode) = Self.checkConsumption(request)
                guard status == 202 else {
                    return errorCode.map { Self.error(status, $0, "Invalid request.") } ?? HTTPResponse(status: status, contentType: "application/json", body: "")
                }
                recorder.update { $0.consumptions.append((TransactionID(path[4]), JSONValue.parse(Array(request.body))?.objectValue ?? [:])) }
                return HTTPResponse(status: 202)
            }
            guard request.method == "POST", path.count == 5, path[0] == "inApps", path[1] == "v1", path[2] == "transactions", path[4] == "finish" else {
                return HTTPResponse(status: 404)
            }
            let now = Date()
            recorder.update {
                $0.finished.append(TransactionID(path[3]))
                $0.finishTimes[TransactionID(path[3]), default: []].append(now)
            }
            return HTTPResponse(status: 200)
        })
    }

    /// An injected failure as the App Store answers it: its error code for the status (Apple's
    /// `TransactionIdNotFoundError`, `RateLimitExceededError`, `GeneralInternalError`, `GeneralInternalRetryableError`).
    static func answer(_ failure: Failure) -> HTTPResponse {
        let (code, message) = switch failure.status {
        case 404: (4040010, "Transaction id not found.")
        case 429: (4290000, "Rate limit exceeded.")
        case 503: (5000001, "An unknown retryable error occurred. Please try again.")
        default: (5000000, "An unknown error occurred.")
        }
        var response = error(failure.status, code, message)
        // Apple's form: the UNIX time, in milliseconds, from which requests are accepted again.
        if let seconds = failure.retryAfterSeconds { response.headers["Retry-After"] = String(Int64((Date().timeIntervalSince1970 + Double(seconds)) * 1000)) }
        return response
    }

    /// An error as the App Store answers it: its status, and a body with Apple's `errorCode` and `errorMessage`.
    static func error(_ status: Int, _ code: Int, _ message: String) -> HTTPResponse {
        HTTPResponse(status: status, contentType: "application/json", body: #"{"errorCode":\#(code),"errorMessage":"\#(message)"}"#)
    }

    /// A bearer token's claims when the developer key signed it and they are what Apple requires; else nil.
    static func claims(_ token: Substring, publicKey: PublicKey, keyId: String, issuerId: String, bundleId: String) -> [String: JSONValue]? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, let signature = Base64URL.decode(parts[2]),
              publicKey.verifyES256(message: Data("\(parts[0]).\(parts[1])".utf8), rawSignature: signature),
              let header = Base64URL.decode(parts[0]).flatMap({ JSONValue.parse(Array($0))?.objectValue }),
              let claims = Base64URL.decode(parts[1]).flatMap({ JSONValue.parse(Array($0))?.objectValue }),
              header["alg"] == .string("ES256"), header["kid"] == .string(keyId), claims["aud"] == .string("appstoreconnect-v1"),
              claims["bid"] == .string(bundleId), claims["iss"] == .string(issuerId),
              let iat = claims["iat"]?.int64Value, let exp = claims["exp"]?.int64Value, exp > iat, exp - iat <= 3600 else { return nil }
        return claims
    }

    /// `ConsumptionRequest` as Apple documents it: 202, or 400 with the error code (none when malformed).
    static func checkConsumption(_ request: HTTPRequest) -> (status: Int, errorCode: Int?) {
        guard request.header("content-type") == "application/json", let body = JSONValue.parse(Array(request.body))?.objectValue else { return (400, nil) }
        let known: Set = ["customerConsented", "deliveryStatus", "sampleContentProvided", "consumptionPercentage", "refundPreference"]
        guard Set(body.keys).isSubset(of: known) else { return (400, nil) }
        guard body["customerConsented"] == .bool(true) else { return (400, 4000035) }
        let statuses = ["DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_WRONG_ITEM", "UNDELIVERED_SERVER_OUTAGE", "UNDELIVERED_OTHER"]
        guard let delivery = body["deliveryStatus"]?.stringValue, statuses.contains(delivery) else { return (400, 4000036) }
        guard case .bool = body["sampleContentProvided"] else { return (400, 4000041) }
        if let percentage = body["consumptionPercentage"] {
            guard let value = percentage.int64Value, (0...100_000).contains(value), delivery == "DELIVERED" || value == 0 else { return (400, nil) }
        }
        if let preference = body["refundPreference"] {
            guard let value = preference.stringValue, ["DECLINE", "GRANT_FULL", "GRANT_PRORATED"].contains(value) else { return (400, nil) }
        }
        return (202, nil)
    }
}

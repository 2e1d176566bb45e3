import Database
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPClient
import HTTPServer
import JSON
import Metrics
import PurchaseEvents
import PurchaseDomain
import PurchaseStore
import RequestSigning
import WorkerRuntime

/// The read side of `iap-ingest`: `GET /v1/users/{userId}` answers what a user owns now, read from the purchase
/// store in one transaction —
/// `{"userId", "balances": {currency: amount}, "entitlements": [{"entitlement", "productId", "expiresAt" | null}],
/// "pending": [purchases granted but not finished], "subscriptions": [the statuses of the user's subscriptions]}`.
///
/// `GET /v1/users/{userId}/history` answers what happened to them (`answerHistory`).
///
/// With the App Store Server API configured, `POST /v1/users/{userId}/sync` syncs the user with the App Store
/// (`AppStoreUserSync`) and answers 202 `{"userId", "transactionId", "listed", "submitted"}` once what it found is
/// submitted (read the holdings again once the pipeline has granted it); 404 `noAppStoreTransaction` when the user owns
/// none, 429 within a minute of the user's last sync, 503 (`Retry-After`) when the App Store or the broker cannot be reached.
/// It submits purchases for the user, so it is served only with a secret (`IngestApp` leaves it off without one).
///
/// With a secret, every request must carry a `RequestSignature`; without one the executable refuses to start
/// unless it is bound to a private address (see `PrivateAddress`) — and then whatever reaches that address (an
/// ingress forwarding every path) reads any user's holdings: put the secret on anything public.
public final class UserHoldingsAPI: Sendable {
    public static let pathPrefix = "/v1/users/"

    let store: SQLPurchaseStore
    private let secret: Data?
    let logger: Logger
    private let metrics: MetricsRegistry
    private let now: @Sendable () -> Date
    private let sync: AppStoreUserSync?

    public init(store: SQLPurchaseStore, secret: Data?, logger: Logger, metrics: MetricsRegistry, sync: AppStoreUserSync? = nil,
                now: @escaping @Sendable () -> Date = Date.init) {
        self.sync = sync
        self.store = store
        self.secret = secret
        self.logger = logger
        self.metrics = metrics
        self.now = now
        IngestAPI.declareRequestMetrics(metrics)
    }

    /// Answers `GET /v1/users/{userId}` and `POST /v1/users/{userId}/sync`; nil for other paths.
    public func route(_ request: HTTPRequest) async -> HTTPResponse? {
        guard request.path.hasPrefix(Self.pathPrefix) else { return nil }
        // `{userId}/sync` and `{userId}/history`, not a user whose id is `sync` or `history`.
        let twoSegments = request.path.dropFirst(Self.pathPrefix.count).split(separator: "/", omittingEmptySubsequences: false).count == 2
        let route: String, response: HTTPResponse
        if twoSegments && request.path.hasSuffix(Self.syncSuffix) {
            (route, response) = ("sync", await answerSync(request))
        } else if twoSegments && request.path.hasSuffix(Self.historySuffix) {
            (route, response) = ("history", await answerHistory(request))
        } else {
            (route, response) = ("users", await answer(request))
        }
        metrics.increment("iap_ingest_requests_total", ["route": route, "status": String(response.status)])
        return response
    }

    static let syncSuffix = "/sync"

    /// The user a request names (`{userId}` after the prefix, before `suffix`), or the answer that refuses it: a method
    /// but `method`, a bad signature, an id the producer contract does not allow.
    func user(of request: HTTPRequest, method: String, suffix: String = "") -> Result<UserID, Refusal> {
        guard request.method == method else { return .failure(Refusal(IngestAPI.error(405, "methodNotAllowed", "use \(method)"))) }
        if let secret, case .failure(let refusal) = RequestSignature.verify(request, secret: secret, now: now()) {
            return .failure(Refusal(IngestAPI.error(401, "badSignature", refusal.detail)))
        }
        let encoded = request.path.dropFirst(Self.pathPrefix.count).dropLast(suffix.count)
        guard !encoded.isEmpty, !encoded.contains("/"), let userId = Self.percentDecoded(encoded), Self.isUserId(userId) else {
            return .failure(Refusal(IngestAPI.error(400, "invalidUserId", "expected /v1/users/{userId}\(suffix): one percent-encoded path segment "
                                                    + "of 1 to 256 characters, none of U+0000-U+001F and U+007F")))
        }
        return .success(UserID(userId))
    }

    /// Whether `text` is a user id the producer contract allows (`common.v1`'s `userId`), so that every user the store can
    /// hold is read: 1 to 256 characters (Unicode scalars, as the schema counts them: up to 1,024 bytes), none of
    /// U+0000-U+001F and U+007F.
    static func isUserId(_ text: String) -> Bool {
        var count = 0
        for scalar in text.unicodeScalars {
            count += 1
            if count > 256 || scalar.value < 0x20 || scalar.value == 0x7F { return false }
        }
        return count > 0
    }

    /// `text` with its percent-escapes decoded byte for byte; nil for a broken escape or bytes that are not UTF-8.
    /// Foundation's `removingPercentEncoding` drops a leading byte order mark: `%EF%BB%BFuser` would read the holdings of `user`.
    static func percentDecoded(_ text: Substring) -> String? {
        func hex(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        var input = text.utf8.makeIterator()
        while let byte = input.next() {
            guard byte == UInt8(ascii: "%") else { bytes.append(byte); continue }
            guard let high = input.next().flatMap(hex), let low = input.next().flatMap(hex) else { return nil }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    struct Refusal: Error {
        let response: HTTPResponse
        init(_ response: HTTPResponse) { self.response = response }
    }

    private func answerSync(_ request: HTTPRequest) async -> HTTPResponse {
        let userId: UserID
        switch user(of: request, method: "POST", suffix: Self.syncSuffix) {
        case .success(let user): userId = user
        case .failure(let refusal): return refusal.response
        }
        guard let sync else { return IngestAPI.error(404, "syncNotConfigured", "syncing with the App Store needs the App Store Server API (--appstore-api-url)") }
        func retry(_ response: HTTPResponse, after wait: Duration?) -> HTTPResponse {
            var response = response
            response.headers["Retry-After"] = String(max(1, wait?.components.seconds ?? 5))
            return response
        }
        switch await sync.sync(userId) {
        case .success(let report):
            logger.info("user synced with the App Store", ["userId": userId, "listed": report.listed, "submitted": report.submitted])
            return IngestAPI.json(202, ["userId": .string(userId.rawValue), "transactionId": .string(report.transactionId.rawValue),
                                        "listed": .integer(Int64(report.listed)), "submitted": .integer(Int64(report.submitted))])
        case .failure(.noTransaction):
            return IngestAPI.error(404, "noAppStoreTransaction", "the user owns no App Store transaction: submit one first")
        case .failure(.tooSoon(let wait)):
            return retry(IngestAPI.error(429, "syncedRecently", "this user is being synced or was synced recently; retry after the time given"), after: wait)
        case .failure(.storeUnavailable(let detail, let wait)):
            logger.warning("App Store sync unavailable", ["userId": userId, "detail": detail])
            return retry(IngestAPI.error(503, "storeUnavailable", "the App Store could not be asked now; retry"), after: wait)
        case .failure(.storeRefused(let detail)):
            logger.error("App Store sync refused", ["userId": userId, "detail": detail])
            return IngestAPI.error(502, "storeRefused", detail)
        case .failure(.publishFailed(let detail)):
            logger.warning("App Store sync not published", ["userId": userId, "detail": detail])
            return retry(IngestAPI.error(503, "brokerUnavailable", "what the App Store listed was not all acknowledged; retry"), after: nil)
        }
    }

    private func answer(_ request: HTTPRequest) async -> HTTPResponse {
        let userId: UserID
        switch user(of: request, method: "GET") {
        case .success(let user): userId = user
        case .failure(let refusal): return refusal.response
        }
        do {
            if try await store.wasErased(userId) { return Self.erased }
            let holdings = try await store.holdings(of: userId, at: now())
            return HTTPResponse(status: 200, headers: ["Content-Type": "application/json", "Cache-Control": "no-store"], body: try Self.encode(holdings))
        } catch {
            return readFailure(error, what: "holdings")
        }
    }

    /// The answer about a user erased on request (`SQLPurchaseStore.erase`): gone, not an empty account.
    static var erased: HTTPResponse { IngestAPI.error(404, "userErased", "this user was erased on request") }

    /// The answer to a read of the store that failed: 500 when the store refused it, else 503 to retry.
    func readFailure(_ error: any Error, what: String) -> HTTPResponse {
        if let error = error as? DatabaseError, !error.isRetriable {
            logger.error("\(what) not readable", ["error": error.description])
            return IngestAPI.error(500, "storeError", "the purchase store refused the read")
        }
        logger.error("\(what) not readable", ["error": "\(error)"])
        var response = IngestAPI.error(503, "storeUnavailable", "the purchase store did not answer; retry")
        response.headers["Retry-After"] = "5"
        return response
    }

    /// The JSON apps get (and `iapctl user` prints): sorted keys, RFC 3339 times, `expiresAt` null for good. `balances`
    /// has a member per currency code as the store keys it, by its bytes: two spellings of one text are two members.
    public static func encode(_ holdings: UserHoldings) throws -> Data {
        var others = holdings
        others.balances = [:]
        // Written apart: a `JSONValue.object` is keyed by `String`, which would keep one of two spellings of a code.
        var fields = try EventCodec.json(others).objectValue ?? [:]
        fields["balances"] = nil
        let balances = JSONValue.serializedObject(holdings.balances.map { (name: $0.key.rawValue, value: JSONValue.integer($0.value).serialized) })
        return Data(JSONValue.serializedObject(fields.map { (name: $0.key, value: $0.value.serialized) } + [(name: "balances", value: balances)]))
    }
}

/// Whether an address reaches only a private network (loopback, RFC 1918, link-local, IPv6 unique-local), or only this
/// machine.
public enum PrivateAddress {
    public static func contains(_ host: String) -> Bool {
        if isLoopback(host) { return true }
        switch parse(host) {
        case .v4(let first, let second)?:
            return first == 10 || (first == 172 && (16...31).contains(second)) || (first == 192 && second == 168) || (first == 169 && second == 254)
        case .v6(let bytes)?:
            return bytes[0] & 0xFE == 0xFC || (bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80)
        case nil:
            return false
        }
    }

    /// Whether `host` is this machine: `localhost`, 127.0.0.0/8 or ::1 (in a URL's brackets too).
    public static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" { return true }
        switch parse(host) {
        case .v4(let first, _)?: return first == 127
        case .v6(let bytes)?: return bytes.dropLast().allSatisfy { $0 == 0 } && bytes.last == 1
        case nil: return false
        }
    }

    private enum Parsed {
        /// The first two octets.
        case v4(UInt32, UInt32)
        case v6([UInt8])
    }

    private static func parse(_ host: String) -> Parsed? {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            let a = UInt32(bigEndian: v4.s_addr)
            return .v4(a >> 24, (a >> 16) & 0xFF)
        }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        var v6 = in6_addr()
        if inet_pton(AF_INET6, bare, &v6) == 1 { return .v6(withUnsafeBytes(of: &v6) { Array($0) }) }
        return nil
    }
}

extension UserHoldingsAPI {
    /// What a client asks of the read side about a user.
    public enum Question: Sendable {
        /// `GET /v1/users/{userId}`: what the user owns.
        case holdings
        /// `POST /v1/users/{userId}/sync`: sync the user with the App Store first.
        case sync
        /// `GET /v1/users/{userId}/history?limit=&before=`: a page of what happened.
        case history(limit: Int?, before: String?)
    }

    /// The client side, as an app's backend (or `iapctl user --ingest`) asks `question` of `{ingest}` about `userId`,
    /// signed with `secret` when given: the status and the body.
    public static func fetch(_ userId: String, ingest: String, secret: Data?, _ question: Question = .holdings) async throws -> (status: Int, body: Data) {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove("/")
        guard let segment = userId.addingPercentEncoding(withAllowedCharacters: allowed) else {
            throw URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "not a user id: \(userId)"])
        }
        let method: String, path: String, query: String?
        switch question {
        case .holdings: (method, path, query) = ("GET", pathPrefix + segment, nil)
        case .sync: (method, path, query) = ("POST", pathPrefix + segment + syncSuffix, nil)
        case .history(let limit, let before):
            let parameters = [limit.map { "limit=\($0)" }, before.flatMap { $0.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) }.map { "before=\($0)" }]
            let joined = parameters.compactMap { $0 }.joined(separator: "&")
            (method, path, query) = ("GET", pathPrefix + segment + historySuffix, joined.isEmpty ? nil : joined)
        }
        guard let url = URL(string: ingest.trimmingCharacters(in: CharacterSet(charactersIn: "/")) + path + (query.map { "?" + $0 } ?? "")) else {
            throw URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "not a URL: \(ingest)"])
        }
        let headers: [String: String] = secret.map { RequestSignature.headers(secret: $0, method: method, path: path, query: query) } ?? [:]
        // The client the store APIs use (libcurl on a thread of its own), not URLSession, which drives libcurl through
        // dispatch sources on its sockets.
        switch await HTTPClient(timeout: .seconds(60), maxConnections: 1).send(HTTPClient.Request(method: method, url: url.absoluteString,
                                                                                                headers: headers.map { (name: $0.key, value: $0.value) })) {
        case .success(let response): return (response.status, Data(response.body))
        case .failure(let failure): throw URLError(.cannotConnectToHost, userInfo: [NSLocalizedDescriptionKey: failure.description])
        }
    }
}

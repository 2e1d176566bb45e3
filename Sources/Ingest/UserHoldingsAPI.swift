import Database
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPServer
import JSON
import Metrics
import PurchaseEvents
import PurchaseDomain
import PurchaseStore
import WorkerRuntime

/// The read side of `iap-ingest`: `GET /v1/users/{userId}` answers what a user owns now, read from the purchase
/// store in one transaction —
/// `{"userId", "balances": {currency: amount}, "entitlements": [{"entitlement", "productId", "expiresAt" | null}],
/// "pending": [purchases granted but not finished], "subscriptions": [the statuses of the user's subscriptions]}`.
///
/// With a secret, every request must carry a `RequestSignature`; without one the executable refuses to start
/// unless it is bound to a private address (see `PrivateAddress`) — and then whatever reaches that address (an
/// ingress forwarding every path) reads any user's holdings: put the secret on anything public.
public final class UserHoldingsAPI: Sendable {
    public static let pathPrefix = "/v1/users/"

    private let store: SQLPurchaseStore
    private let secret: Data?
    private let logger: Logger
    private let metrics: MetricsRegistry
    private let now: @Sendable () -> Date

    public init(store: SQLPurchaseStore, secret: Data?, logger: Logger, metrics: MetricsRegistry, now: @escaping @Sendable () -> Date = Date.init) {
        self.store = store
        self.secret = secret
        self.logger = logger
        self.metrics = metrics
        self.now = now
        IngestAPI.declareRequestMetrics(metrics)
    }

    /// Answers `GET /v1/users/{userId}`; nil for other paths.
    public func route(_ request: HTTPRequest) async -> HTTPResponse? {
        guard request.path.hasPrefix(Self.pathPrefix) else { return nil }
        let response = await answer(request)
        metrics.increment("iap_ingest_requests_total", ["route": "users", "status": String(response.status)])
        return response
    }

    private func answer(_ request: HTTPRequest) async -> HTTPResponse {
        guard request.method == "GET" else { return IngestAPI.error(405, "methodNotAllowed", "use GET") }
        if let secret, case .failure(let refusal) = RequestSignature.verify(request, secret: secret, now: now()) {
            return IngestAPI.error(401, "badSignature", refusal.detail)
        }
        let encoded = request.path.dropFirst(Self.pathPrefix.count)
        // User ids are what the producer contract allows: no control characters, at most 256 bytes.
        guard !encoded.isEmpty, !encoded.contains("/"), let userId = String(encoded).removingPercentEncoding, !userId.isEmpty,
              userId.utf8.count <= 256, !userId.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            return IngestAPI.error(400, "invalidUserId", "expected /v1/users/{userId}: one percent-encoded path segment of at most 256 bytes, no control characters")
        }
        do {
            let holdings = try await store.holdings(of: UserID(userId), at: now())
            return HTTPResponse(status: 200, headers: ["Content-Type": "application/json", "Cache-Control": "no-store"], body: try Self.encode(holdings))
        } catch let error as DatabaseError where !error.isRetriable {
            logger.error("holdings not readable", ["error": error.description])
            return IngestAPI.error(500, "storeError", "the purchase store refused the read")
        } catch {
            logger.error("holdings not readable", ["error": "\(error)"])
            var response = IngestAPI.error(503, "storeUnavailable", "the purchase store did not answer; retry")
            response.headers["Retry-After"] = "5"
            return response
        }
    }

    /// The JSON apps get (and `iapctl user` prints): sorted keys, RFC 3339 times, `expiresAt` null for good.
    public static func encode(_ holdings: UserHoldings) throws -> Data { Data(try EventCodec.json(holdings).serialized) }
}

/// Whether a listening address reaches only a private network: loopback, RFC 1918, link-local, IPv6 unique-local.
public enum PrivateAddress {
    public static func contains(_ host: String) -> Bool {
        if host == "localhost" { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            let a = UInt32(bigEndian: v4.s_addr)
            let (first, second) = (a >> 24, (a >> 16) & 0xFF)
            return first == 127 || first == 10 || (first == 172 && (16...31).contains(second)) || (first == 192 && second == 168)
                || (first == 169 && second == 254)
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 {
            let bytes = withUnsafeBytes(of: &v6) { Array($0) }
            let loopback = bytes.dropLast().allSatisfy { $0 == 0 } && bytes.last == 1
            return loopback || bytes[0] & 0xFE == 0xFC || (bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80)
        }
        return false
    }
}

extension UserHoldingsAPI {
    /// The client side, as an app's backend (or `iapctl user --ingest`) asks:
    /// `GET {ingest}/v1/users/{userId}`, signed with `secret` when given: the status and the body.
    public static func fetch(_ userId: String, ingest: String, secret: Data?) async throws -> (status: Int, body: Data) {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove("/")
        guard let segment = userId.addingPercentEncoding(withAllowedCharacters: allowed),
              let url = URL(string: ingest.trimmingCharacters(in: CharacterSet(charactersIn: "/")) + pathPrefix + segment) else {
            throw URLError(.badURL, userInfo: [NSLocalizedDescriptionKey: "not a URL: \(ingest)"])
        }
        var request = URLRequest(url: url)
        if let secret {
            for (name, value) in RequestSignature.headers(secret: secret, method: "GET", path: pathPrefix + segment) {
                request.setValue(value, forHTTPHeaderField: name)
            }
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
    }
}

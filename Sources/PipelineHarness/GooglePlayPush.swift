import Foundation
import HTTPClient
import JSON
import PurchaseDomain
import StoreFixtures

/// Google's Cloud Pub/Sub push of Play's real-time developer notifications to the ingest (`POST
/// /v1/googleplay/notifications`), as the demo and the chaos run play it: one of Google's signing keys, the push
/// subscription's audience and service account, and deliveries retried until answered 2xx, as Pub/Sub retries them.
public struct GooglePlayPush: Sendable {
    /// The audience the push subscription's OIDC tokens name, and the service account it authenticates as.
    public static let audience = "https://iap.example.com/v1/googleplay/notifications"
    public static let serviceAccount = "play-rtdn@stand-in-project.iam.gserviceaccount.com"
    public let signer: GooglePlayPushSigner

    public init(signer: GooglePlayPushSigner) { self.signer = signer }

    public init() throws { self.init(signer: try GooglePlayPushSigner()) }

    /// The ingest's settings for the pushes: the audience, the service account, and Google's certificates, written to
    /// a file in `directory`.
    public func environment(in directory: URL) throws -> [String: String] {
        let certificates = directory.appendingPathComponent("google-certs.json")
        try Data(GooglePlayPushSigner.certificatesJSON([signer]).utf8).write(to: certificates)
        return ["IAP_GOOGLEPLAY_PUSH_AUDIENCE": Self.audience, "IAP_GOOGLEPLAY_PUSH_SERVICE_ACCOUNT": Self.serviceAccount,
                "IAP_GOOGLEPLAY_PUSH_KEYS": certificates.path]
    }

    /// A `oneTimeProductNotification` of the harness's package: `type` 1 purchased, of `product` under `token`.
    public static func oneTimeProduct(_ type: Int64 = 1, token: PurchaseToken, product: ProductID) -> String {
        GooglePlayPushSigner.notification(package: StandInGooglePlay.packageName, "oneTimeProductNotification", [
            "version": .string("1.0"), "notificationType": .integer(type), "purchaseToken": .string(token.rawValue), "sku": .string(product.rawValue)])
    }

    /// One push of each of `notifications` to the ingest at `ingest` (`http://host:port`), with Google's OIDC token (or
    /// `authorization`, a forged one): the status each was answered (0: none).
    public func send(_ notifications: [String], to ingest: String, authorization: String? = nil) async throws -> [Int] {
        let header = try authorization ?? signer.authorization(audience: Self.audience, email: Self.serviceAccount)
        let url = ingest + "/v1/googleplay/notifications"
        let requests = notifications.map { notification in
            HTTPClient.Request(method: "POST", url: url, headers: [("Authorization", header), ("Content-Type", "application/json")],
                               body: Array(GooglePlayPushSigner.pushBody(notification)))
        }
        return await HTTPClient(timeout: .seconds(30), maxConnections: 16).send(all: requests).map { result in
            switch result {
            case .success(let response): response.status
            case .failure: 0
            }
        }
    }

    /// Pushes each of `notifications` until the ingest (its address asked of `ingest` before each round: it may have moved)
    /// answers 2xx, as Pub/Sub does, retrying with a growing backoff for at most `timeout` seconds. Returns the
    /// deliveries that were retried, those never acknowledged in time, and the answers that refused them (status → count;
    /// 0: no answer).
    public func deliver(_ notifications: [String], to ingest: () async throws -> String,
                        timeout: TimeInterval = 120) async throws -> (retried: Int, undelivered: Int, refusals: [Int: Int]) {
        var pending = Array(notifications.indices)
        var retried = Set<Int>()
        var refusals: [Int: Int] = [:]
        var backoff = Duration.milliseconds(100)
        let deadline = Date().addingTimeInterval(timeout)
        while !pending.isEmpty {
            let statuses = try await send(pending.map { notifications[$0] }, to: try await ingest())
            let refused = zip(pending, statuses).filter { !(200..<300).contains($0.1) }
            for (_, status) in refused { refusals[status, default: 0] += 1 }
            pending = refused.map(\.0)
            guard !pending.isEmpty, Date() < deadline else { break }
            retried.formUnion(pending)
            try await Task.sleep(for: backoff)
            backoff = min(backoff * 2, .seconds(5))
        }
        return (retried.count, pending.count, refusals)
    }
}

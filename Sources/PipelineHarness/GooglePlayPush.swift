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
    /// answers 2xx, as Pub/Sub does (`deliverUntilAcknowledged`).
    public func deliver(_ notifications: [String], to ingest: () async throws -> String,
                        timeout: TimeInterval = 120) async throws -> (retried: Int, undelivered: Int, refusals: [Int: Int]) {
        try await deliverUntilAcknowledged(notifications.count, to: ingest, timeout: timeout) { pending, address in
            try await send(pending.map { notifications[$0] }, to: address)
        }
    }
}

import Foundation
import JSON
import StoreFixtures
import Testing
import TestSupport

/// `POST /v1/googleplay/notifications` of `iap-ingest` as a process, over real HTTP, against the broker: a Pub/Sub push
/// with a current OIDC token of Google's, for this endpoint's audience and the push's service account, is published as a
/// `store.notification` keyed by its purchase token; every other push is refused 401, and nothing of it is published.
@Suite(TestServices.broker, .timeLimit(.minutes(5)))
struct GooglePlayPushTests {
    static let audience = "https://iap.example.com/v1/googleplay/notifications"
    static let email = "play-rtdn-push@stand-in-project.iam.gserviceaccount.com"

    @Test func onlyAPushGoogleSignedForThisEndpointIsPublished() async throws {
        let google = try GooglePlayPushSigner(), forger = try GooglePlayPushSigner(keyID: google.keyID)
        let keys = FileManager.default.temporaryDirectory.appendingPathComponent("google-certs-\(UUID().uuidString).json")
        try Data(GooglePlayPushSigner.certificatesJSON([google]).utf8).write(to: keys)
        defer { try? FileManager.default.removeItem(at: keys) }
        let ingest = try await IngestTests.Running(["--googleplay-push-audience", Self.audience, "--googleplay-push-service-account", Self.email,
                                                    "--googleplay-push-keys", keys.path])
        try await waitUntil("ready") { try await httpRequest(ingest.base + "/readyz").status == 200 }
        let url = ingest.base + "/v1/googleplay/notifications"
        let renewal = GooglePlayPushSigner.notification(package: "com.example.coins", "subscriptionNotification", [
            "version": .string("1.0"), "notificationType": .integer(2), "purchaseToken": .string("sub-token-1"), "subscriptionId": .string("pass.monthly")])
        let body = GooglePlayPushSigner.pushBody(renewal)

        let refusals = [
            ("no token", [String: String]()),
            ("a key Google does not publish", ["Authorization": try forger.authorization(audience: Self.audience, email: Self.email)]),
            ("another audience", ["Authorization": try google.authorization(audience: "https://elsewhere.example.com/push", email: Self.email)]),
            ("another service account", ["Authorization": try google.authorization(audience: Self.audience, email: "someone@else.iam.gserviceaccount.com")]),
            ("an expired token", ["Authorization": try google.authorization(audience: Self.audience, email: Self.email, issuedAt: Date().addingTimeInterval(-7200))]),
            ("another issuer", ["Authorization": try google.authorization(audience: Self.audience, email: Self.email, issuer: "https://evil.example.com")]),
            ("an unverified e-mail", ["Authorization": try google.authorization(audience: Self.audience, email: Self.email, emailVerified: false)]),
        ]
        for (what, headers) in refusals {
            let answer = try await httpRequest(url, method: "POST", body: body, headers: headers)
            #expect(answer.status == 401, "\(what): \(answer)")
        }
        let authorized = ["Authorization": try google.authorization(audience: Self.audience, email: Self.email)]
        let malformed = try await httpRequest(url, method: "POST", body: Data(#"{"message": {}}"#.utf8), headers: authorized)
        #expect(malformed.status == 400, "\(malformed)")
        let accepted = try await httpRequest(url, method: "POST", body: body, headers: authorized)
        #expect(accepted.status == 200, "\(accepted)")

        let events = try await ingest.events("iap.store.notification", count: 1)
        #expect(events.count == 1, "only the authenticated push")
        let event = try #require(events.first)
        #expect(event["key"]?.stringValue == "googleplay:sub-token-1", "keyed by the purchase: its notifications in order")
        let value = try #require(event["value"]?.objectValue)
        #expect(value["store"]?.stringValue == "googleplay" && value["developerNotification"]?.stringValue == renewal, "\(value)")
        #expect(try await ingest.process.terminate() == 0)
    }

    @Test func withoutItsSettingsTheRouteIsNotServed() async throws {
        let ingest = try await IngestTests.Running()
        try await waitUntil("ready") { try await httpRequest(ingest.base + "/readyz").status == 200 }
        let answer = try await httpRequest(ingest.base + "/v1/googleplay/notifications", method: "POST", body: GooglePlayPushSigner.pushBody("{}"))
        #expect(answer.status == 404)
        #expect(try await ingest.process.terminate() == 0)
    }
}

import Foundation
import JSON
import StoreFixtures
import Testing
import TestSupport

/// `POST /v1/stripe/webhooks` of `iap-ingest` as a process, over real HTTP, against the broker: a delivery signed with
/// one of the endpoint's secrets (the new or the old one while a secret is rolled) within the tolerance is published as
/// a `store.notification` under Stripe's event id, keyed by its purchase; a tampered body, a stale timestamp, another
/// endpoint's secret or no signature is refused 400 with the reason and counted, and nothing of it is published; an event
/// of a type the pipeline does not act on is answered 200 and not published.
@Suite(TestServices.broker, .timeLimit(.minutes(5)))
struct StripeWebhookTests {
    static func event(_ id: String, type: String, object: [String: JSONValue]) -> Data {
        Data(JSONValue.object(["id": .string(id), "object": .string("event"), "type": .string(type), "created": .integer(Int64(Date().timeIntervalSince1970)),
                               "livemode": .bool(false), "pending_webhooks": .integer(1), "data": .object(["object": .object(object)])]).serializedText.utf8)
    }

    @Test func onlyDeliveriesSignedWithTheEndpointsSecretsArePublished() async throws {
        let old = StripeWebhookSigner.newSecret(), current = StripeWebhookSigner.newSecret()
        let secrets = FileManager.default.temporaryDirectory.appendingPathComponent("stripe-secrets-\(UUID().uuidString)")
        try Data("\(current)\n\(old)\n".utf8).write(to: secrets)
        defer { try? FileManager.default.removeItem(at: secrets) }
        let ingest = try await IngestTests.Running(["--stripe-webhook-secrets", secrets.path])
        try await waitUntil("ready") { try await httpRequest(ingest.base + "/readyz").status == 200 }
        let url = ingest.base + "/v1/stripe/webhooks"
        let refund = Self.event("evt_refund1", type: "charge.refunded", object: [
            "id": .string("ch_1"), "object": .string("charge"), "amount": .integer(1000), "amount_refunded": .integer(250), "refunded": .bool(false),
            "payment_intent": .string("pi_refunded1"), "currency": .string("usd")])
        let signer = StripeWebhookSigner(secrets: [current])

        var tampered = refund
        tampered.append(contentsOf: Array(" ".utf8))
        let refusals: [(String, [String: String], Data, String)] = [
            ("no signature", [:], refund, "no Stripe-Signature header"),
            ("a tampered body", ["Stripe-Signature": signer.header(for: refund)], tampered, "no v1 signature"),
            ("a stale timestamp", ["Stripe-Signature": signer.header(for: refund, at: Date().addingTimeInterval(-301))], refund, "more than 300 s"),
            ("another endpoint's secret", ["Stripe-Signature": StripeWebhookSigner().header(for: refund)], refund, "no v1 signature"),
        ]
        for (what, headers, body, reason) in refusals {
            let answer = try await httpRequest(url, method: "POST", body: body, headers: headers)
            #expect(answer.status == 400 && answer.body.contains(reason), "\(what): \(answer)")
        }
        // The secret being rolled out signs alone, then the old one alone: both taken.
        let accepted = try await httpRequest(url, method: "POST", body: refund, headers: ["Stripe-Signature": signer.header(for: refund)])
        #expect(accepted.status == 200, "\(accepted)")
        let dispute = Self.event("evt_dispute1", type: "charge.dispute.created", object: [
            "id": .string("dp_1"), "object": .string("dispute"), "charge": .string("ch_1"), "payment_intent": .string("pi_refunded1"),
            "amount": .integer(1000), "status": .string("needs_response")])
        let rolled = try await httpRequest(url, method: "POST", body: dispute, headers: ["Stripe-Signature": StripeWebhookSigner(secrets: [old]).header(for: dispute)])
        #expect(rolled.status == 200, "the old secret, still configured: \(rolled)")
        let other = Self.event("evt_other1", type: "customer.created", object: ["id": .string("cus_1"), "object": .string("customer")])
        let ignored = try await httpRequest(url, method: "POST", body: other, headers: ["Stripe-Signature": signer.header(for: other)])
        #expect(ignored.status == 200, "\(ignored)")

        let events = try await ingest.events("iap.store.notification", count: 3)
        #expect(events.count == 2, "the two signed events of handled types, nothing else: \(events.count)")
        #expect(events.map { $0["headers"]?.objectValue?["ce_id"]?.stringValue ?? "" }.sorted() == ["notification:stripe:evt_dispute1", "notification:stripe:evt_refund1"])
        #expect(events.allSatisfy { $0["key"]?.stringValue == "stripe:pi_refunded1" }, "keyed by the payment intent: its events in order")
        let value = try #require(events.first { $0["headers"]?.objectValue?["ce_id"]?.stringValue == "notification:stripe:evt_refund1" }?["value"]?.objectValue)
        #expect(value["store"]?.stringValue == "stripe" && value["stripeEvent"]?.stringValue == String(decoding: refund, as: UTF8.self), "\(value)")

        let metrics = try await httpRequest(ingest.base + "/metrics").body
        #expect(metrics.contains(#"iap_ingest_stripe_signatures_refused_total{reason="mismatch"} 2"#), "\(metrics)")
        #expect(metrics.contains(#"iap_ingest_stripe_signatures_refused_total{reason="missingHeader"} 1"#))
        #expect(metrics.contains(#"iap_ingest_stripe_signatures_refused_total{reason="outsideTolerance"} 1"#))
        #expect(metrics.contains("iap_ingest_stripe_events_ignored_total 1"))
        #expect(try await ingest.process.terminate() == 0)
    }

    @Test func withoutItsSecretsTheRouteIsNotServed() async throws {
        let ingest = try await IngestTests.Running()
        try await waitUntil("ready") { try await httpRequest(ingest.base + "/readyz").status == 200 }
        let body = Self.event("evt_x", type: "charge.refunded", object: ["id": .string("ch_x")])
        let answer = try await httpRequest(ingest.base + "/v1/stripe/webhooks", method: "POST", body: body,
                                           headers: ["Stripe-Signature": StripeWebhookSigner().header(for: body)])
        #expect(answer.status == 404)
        #expect(try await ingest.process.terminate() == 0)
    }
}

import Foundation
import HTTPServer
import JSON
import Metrics
import PurchaseDomain
import PurchaseEvents
import StoreVerification

extension IngestAPI {
    /// The longest Stripe event the route takes (and `store.notification` carries): Stripe's events are a few KiB, a
    /// Checkout Session's with much metadata some tens.
    static let maxStripeEventBytes = 256 * 1024

    /// A webhook delivery of a Stripe event: its `Stripe-Signature` checked against the endpoint's secrets, then, for an
    /// event of a type the pipeline acts on (`StripeEvent.Kind`), published with Stripe's event id as its own and keyed by
    /// the purchase it concerns. A refused signature is answered 400 with the reason and counted, never published; an
    /// event of another type is answered 200 (Stripe would otherwise retry it for days) and counted, not published. What
    /// the event says is judged by the verifier, which reads the purchase back from Stripe's API where it decides anything.
    func stripeWebhook(_ request: HTTPRequest) async -> HTTPResponse {
        guard let signature = configuration.stripeWebhook else { return Self.error(404, "notFound", "Stripe webhooks are not configured") }
        if let refusal = signature.refusal(header: request.header(StripeWebhookSignature.header), body: request.body) {
            metrics.increment("iap_ingest_stripe_signatures_refused_total", ["reason": Self.refusalLabel(refusal)])
            logger.warning("Stripe webhook refused", ["reason": refusal.description])
            return Self.error(400, "badSignature", refusal.description)
        }
        let event: StoreNotificationReceived
        switch stripeEvent(request.body) {
        case .refused(let refusal): return refusal
        case .accepted(nil):
            metrics.increment("iap_ingest_stripe_events_ignored_total")
            return Self.json(200, ["ignored": .bool(true)])
        case .accepted(let received?): event = received
        }
        return await publish(consume event, status: 200)
    }

    /// The event a signed body holds as `store.notification` (nil: a type the pipeline does not act on), or the answer
    /// that refuses the body. Not async, so that the parsed body is gone before the publish waits for the broker.
    func stripeEvent(_ body: Data) -> Admission<StoreNotificationReceived?> {
        if let refusal = oversized(body, path: "/v1/stripe/webhooks") { return .refused(refusal) }
        guard let text = String(data: body, encoding: .utf8), let event = StripeEvent(json: body) else {
            return .refused(Self.error(400, "notAStripeEvent", "expected a Stripe event: a JSON object with id, type and data.object"))
        }
        guard StripeAPIClient.isStripeID(event.id.rawValue) else {
            return .refused(Self.error(400, "malformedEventId", "the event's id is not a Stripe id (letters, digits and '_')"))
        }
        guard event.kind != nil else { return .accepted(nil) }
        return .accepted(StoreNotificationReceived(stripeEvent: text, eventId: event.id, subject: event.purchaseSubject, receivedAt: Date()))
    }

    /// A bounded label of why a signature was refused.
    static func refusalLabel(_ refusal: StripeWebhookSignature.Refusal) -> String {
        switch refusal {
        case .missingHeader: "missingHeader"
        case .malformedTimestamp: "malformedTimestamp"
        case .noV1Signature: "noV1Signature"
        case .outsideTolerance: "outsideTolerance"
        case .mismatch: "mismatch"
        }
    }

    /// Declares the Stripe route's counters (each refusal reason at zero, so that an alert sees the first).
    static func declareStripeMetrics(_ metrics: MetricsRegistry) {
        metrics.declare("iap_ingest_stripe_signatures_refused_total", .counter,
                        help: "Stripe webhook deliveries refused for their Stripe-Signature, by reason (alert on mismatch: a secret not configured, or forged deliveries).")
        metrics.declare("iap_ingest_stripe_events_ignored_total", .counter, help: "Stripe events of types the pipeline does not act on, answered 200 and not published.")
        for reason in ["missingHeader", "malformedTimestamp", "noV1Signature", "outsideTolerance", "mismatch"] {
            metrics.increment("iap_ingest_stripe_signatures_refused_total", ["reason": reason], by: 0)
        }
        metrics.increment("iap_ingest_stripe_events_ignored_total", by: 0)
    }
}

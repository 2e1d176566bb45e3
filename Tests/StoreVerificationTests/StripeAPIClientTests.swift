import Foundation
import JSON
import StoreFixtures
import StoreVerification
import Testing
import TestSupport

/// The Stripe API client's writes against the stand-in (`StripeAPIStandIn`), over real HTTP: form-encoded bodies, the
/// secret key as a bearer token, and idempotency keys that make a retry refund once.
@Suite struct StripeAPIClientTests {
    static func paid() -> StripeAPIStandIn.Session {
        .init(clientReferenceId: "user-17", lineItems: [.init(priceId: "price_gems", productId: "prod_gems", quantity: 2, unitAmount: 500)])
    }

    static func client(_ api: StripeAPIStandIn, observer: StoreAPIObserver? = nil) -> StripeAPIClient {
        StripeAPIClient(configuration: .init(baseURL: api.baseURL, secretKey: api.secretKey, observer: observer))
    }

    /// The same key and parameters again answer the first answer (one refund); the same key with other parameters is
    /// Stripe's `idempotency_error`; another key is another refund.
    @Test func anIdempotencyKeyRefundsOnce() async throws {
        let session = Self.paid()
        let api = try StripeAPIStandIn(sessions: [session])
        let intent = try #require(session.paymentIntentId)
        let client = Self.client(api)
        let first = try await client.refund(paymentIntent: intent, amount: 300, idempotencyKey: "refund-tx-1").get()
        let again = try await client.refund(paymentIntent: intent, amount: 300, idempotencyKey: "refund-tx-1").get()
        #expect(first["id"]?.stringValue != nil && first["id"] == again["id"])
        #expect(api.charge(paymentIntent: intent)?.amountRefunded == 300, "refunded once")
        guard case .failure(.refused(400, let detail)) = await client.refund(paymentIntent: intent, amount: 200, idempotencyKey: "refund-tx-1") else {
            Issue.record("a key reused with other parameters is refused")
            return
        }
        #expect(detail.contains("idempotency_error"), "\(detail)")
        #expect(api.charge(paymentIntent: intent)?.amountRefunded == 300)
        let second = try await client.refund(paymentIntent: intent, amount: 200, idempotencyKey: "refund-tx-2").get()
        #expect(second["id"] != first["id"])
        #expect(api.charge(paymentIntent: intent)?.amountRefunded == 500)
        // What is left, and no more.
        _ = try await client.refund(paymentIntent: intent, idempotencyKey: "refund-tx-3").get()
        #expect(api.charge(paymentIntent: intent)?.amountRefunded == 1000)
        guard case .failure(.refused(400, _)) = await client.refund(paymentIntent: intent, amount: 1, idempotencyKey: "refund-tx-4") else {
            Issue.record("a refund of more than is left is refused")
            return
        }
    }

    /// Each refund is a `charge.refunded` event whose share grows with what was refunded.
    @Test func refundsAreListedAsChargeRefundedEvents() async throws {
        let session = Self.paid()
        let api = try StripeAPIStandIn(sessions: [session])
        let intent = try #require(session.paymentIntentId)
        let client = Self.client(api)
        _ = try await client.refund(paymentIntent: intent, amount: 250, idempotencyKey: "r1").get()
        _ = try await client.refund(paymentIntent: intent, amount: 750, idempotencyKey: "r2").get()
        let read = try await client.events(types: ["charge.refunded"], since: nil).get()
        #expect(read.events.map(\.refundedShare) == [25_000, 100_000])
        #expect(read.events.allSatisfy { $0.paymentIntentId == intent && $0.kind == .chargeRefunded })
    }

    /// The body is form-encoded (what is not unreserved percent-encoded), the key a bearer token, the idempotency key
    /// visible ASCII of at most 255 characters or no request is sent.
    @Test func writesAreFormEncodedAndKeyed() async throws {
        let api = try StripeAPIStandIn()
        let client = Self.client(api)
        guard case .failure(.refused(400, let detail)) = await client.post("refunds", form: [("payment_intent", "pi_1 &x=é")], idempotencyKey: "k1") else {
            Issue.record("an unknown payment intent is refused")
            return
        }
        #expect(detail.contains("No such payment_intent: 'pi_1 &x=é'"), "decoded whole by Stripe: \(detail)")
        for key in ["", String(repeating: "k", count: 256), "with space", "ключ"] {
            guard case .failure(.refused(0, _)) = await client.post("refunds", form: [], idempotencyKey: key) else {
                Issue.record("key '\(key.prefix(20))' is refused before any request")
                continue
            }
        }
        #expect(await client.refund(paymentIntent: "../v1/events", idempotencyKey: "k2").failure == .refused(status: 0, detail: "not a payment intent id"))
        #expect(api.requests == ["POST /v1/refunds"])
    }

    /// Each call is told to the observer by its outcome, as the other stores' are; none for a request refused before it
    /// was sent.
    @Test func eachCallIsToldByItsOutcome() async throws {
        let session = Self.paid()
        let api = try StripeAPIStandIn(sessions: [session])
        let counts = Locked<[StoreAPIOutcome: Int]>([:])
        let client = Self.client(api, observer: { outcome in counts.withLock { $0[outcome, default: 0] += 1 } })
        _ = await client.checkoutSession(session.id)
        _ = await client.checkoutSession("cs_test_unknown")
        _ = await client.checkoutSession("not/an/id")
        api.fail(429, times: 1)
        _ = await client.checkoutSession(session.id)
        let wrongKey = StripeAPIClient(configuration: .init(baseURL: api.baseURL, secretKey: "sk_test_other",
                                                            observer: { outcome in counts.withLock { $0[outcome, default: 0] += 1 } }))
        _ = await wrongKey.checkoutSession(session.id)
        #expect(counts.value == [.ok: 1, .notFound: 1, .rateLimited: 1, .unauthorized: 1])
        #expect(api.requests.count == 4)
    }
}

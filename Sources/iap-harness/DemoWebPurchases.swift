import Foundation
import HTTPClient
import JSON
import Kafka
import PipelineHarness
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import StoreFixtures
import StoreVerification
import WorkerRuntime

/// The demo's fifth act, web purchases: the demo's game also sells on the web through Stripe Checkout (a stand-in Stripe
/// API in the demo process). A web player buys three 100-coin packs and ad-free; the game's backend submits both Checkout
/// Sessions, which the verifier reads back from Stripe; the coins are reported consumed. Stripe refunds one of the three
/// packs and the webhook is lost: one pass over Stripe's event list takes back 100 coins. A dispute on ad-free comes by
/// a signed webhook to the ingest and revokes it, once (a delivery signed with another secret is refused); a second pass
/// over the event list publishes nothing.
struct DemoWebPurchases {
    static let player: UserID = "web-player"
    static let coinsPrice = "price_coins100", adfreePrice = "price_adfree"
    /// A 100-coin pack's price, in cents.
    static let unitAmount: Int64 = 199

    /// The stand-in Stripe API and the webhook endpoint's signing secret, as the harness plays Stripe.
    let standIn: StandInStripe
    var stripe: StripeAPIStandIn { standIn.api }
    let coins: StripeAPIStandIn.Session, adfree: StripeAPIStandIn.Session

    init(now: Date) throws {
        coins = .init(id: "cs_test_demoWebCoins", clientReferenceId: Self.player.rawValue,
                      lineItems: [.init(id: "li_demoWebCoins", priceId: Self.coinsPrice, productId: "prod_demoCoins", quantity: 3, unitAmount: Self.unitAmount)],
                      paymentIntentId: "pi_demoWebCoins", created: now)
        adfree = .init(id: "cs_test_demoWebAdfree", clientReferenceId: Self.player.rawValue,
                       lineItems: [.init(id: "li_demoWebAdfree", priceId: Self.adfreePrice, productId: "prod_demoAdfree", unitAmount: 499)],
                       paymentIntentId: "pi_demoWebAdfree", created: now)
        standIn = try StandInStripe()
        for session in [coins, adfree] { standIn.api.set(session) }
    }

    /// What `GET /v1/users/{userId}` must answer for the web player at the end: two of the three packs, no ad-free.
    var expected: [UserID: DemoProductTypes.Holdings] { [Self.player: .init(balances: ["coins": 200])] }

    /// The workers' settings for Stripe: the API and its secret key (verifier, sweeper), the webhook's secret (ingest).
    func settings(in directory: URL) throws -> [String: String] { try standIn.environment(in: directory) }

    /// A reconciler of Stripe's event list alone, as the sweeper's (`StripeEventHistory`), for the act to run its passes.
    func reconciler(store: SQLPurchaseStore, kafka: KafkaConfiguration, codec: EventCodec) throws -> StoreReconciler<ContinuousClock> {
        let api = StripeAPIClient(configuration: .init(baseURL: stripe.baseURL, secretKey: stripe.secretKey))
        return StoreReconciler(configuration: .init(callsPerSecond: 50), histories: [StripeEventHistory(api: api)], store: store,
                               producer: try KafkaProducer(configuration: .init(kafka: kafka)),
                               context: StageContext(codec: codec, logger: Logger(stage: "reconciler", minimum: .warning)), clock: ContinuousClock())
    }

    /// What the act reports: the two passes over Stripe's event list, and what did not happen as it should.
    struct Outcome {
        var first: StoreReconciler<ContinuousClock>.Pass?
        var second: StoreReconciler<ContinuousClock>.Pass?
        var violations: [String] = []
    }

    /// Plays the act.
    func play(store: SQLPurchaseStore, reconciler: StoreReconciler<ContinuousClock>, ingest: String, send: ([any PipelineEvent]) async throws -> Void,
              say: (String) -> Void) async throws -> Outcome {
        var outcome = Outcome()
        let coinsKey = Self.key(coins), adfreeKey = Self.key(adfree)
        func state(_ key: PurchaseKey) async throws -> PurchaseState? { try await store.purchase(key)?.state }
        func balance() async throws -> Int64 { try await store.balances(of: Self.player)["coins"] ?? 0 }

        // The game's backend submits both sessions once the player is back from Checkout.
        try await send([coins, adfree].map { session in
            PurchaseSubmitted(store: .stripe, kind: .stripeCheckout, stripe: .init(checkoutSessionId: session.id), userId: Self.player, submittedAt: Date(),
                              source: .server, submissionId: UUID().uuidString.lowercased())
        })
        try await waitFor(say, "web purchases: three coin packs granted, ad-free finished at its grant", timeout: 120) {
            let (coinsState, adfreeState) = (try await state(coinsKey), try await state(adfreeKey))
            return coinsState == .granted && adfreeState == .finished ? nil : "coins \(coinsState?.rawValue ?? "none"), ad-free \(adfreeState?.rawValue ?? "none")"
        }
        try await send([PurchaseConsumed(store: .stripe, transactionId: coinsKey.transactionId, userId: Self.player, consumedAt: Date())])
        try await waitFor(say, "web purchases: the consumed coins finished", timeout: 120) {
            try await state(coinsKey) == .finished ? nil : "coins \(try await state(coinsKey)?.rawValue ?? "none")"
        }

        // Stripe refunds one of the three packs (a third of the charge); its charge.refunded webhook never arrives.
        let refund = await StripeAPIClient(configuration: .init(baseURL: stripe.baseURL, secretKey: stripe.secretKey))
            .refund(paymentIntent: coins.paymentIntentId ?? "", amount: Self.unitAmount, idempotencyKey: UUID().uuidString)
        if case .failure(let failure) = refund { outcome.violations.append("Stripe's stand-in refused the refund: \(failure)") }
        outcome.first = try await reconciler.reconcileOnce()["stripe"]
        try await waitFor(say, "web purchases: the refunded pack's coins taken back", timeout: 120) {
            let (coinsState, coinsHeld) = (try await state(coinsKey), try await balance())
            return coinsState == .revoked && coinsHeld < 300 ? nil : "coins \(coinsState?.rawValue ?? "none"), \(coinsHeld) held"
        }

        // A dispute on ad-free, by webhook: first a delivery signed with a secret not the endpoint's, then Stripe's.
        let charge = stripe.charge(paymentIntent: adfree.paymentIntentId ?? "")
        let dispute = stripe.emit(type: "charge.dispute.created", object: [
            "id": .string("dp_demoWebAdfree"), "object": .string("dispute"), "charge": .string(charge?.id ?? ""),
            "payment_intent": .string(adfree.paymentIntentId ?? ""), "amount": .integer(charge?.amount ?? 0), "currency": .string("usd"),
            "reason": .string("fraudulent"), "status": .string("needs_response")])
        let body = stripe.eventBody(dispute) ?? Data()
        let forged = await Self.deliver(body, signature: StripeWebhookSigner().header(for: body), to: ingest)
        if forged != 400 { outcome.violations.append("a Stripe webhook signed with another secret was answered \(forged), expected 400") }
        let delivered = await Self.deliver(body, signature: standIn.webhooks.header(for: body), to: ingest)
        if delivered != 200 { outcome.violations.append("Stripe's webhook of the dispute was answered \(delivered), expected 200") }
        try await waitFor(say, "web purchases: the disputed ad-free revoked", timeout: 120) {
            let adfreeState = try await state(adfreeKey)
            let entitled = try await store.entitlements(of: Self.player)["adfree"] != nil
            return adfreeState == .revoked && !entitled ? nil : "ad-free \(adfreeState?.rawValue ?? "none"), entitled \(entitled)"
        }
        outcome.second = try await reconciler.reconcileOnce()["stripe"]

        if outcome.first?.recovered != 1 {
            outcome.violations.append("the first pass over Stripe's events published \(outcome.first?.recovered ?? 0) of the 1 lost webhook")
        }
        if outcome.second?.recovered != 0 { outcome.violations.append("a second pass over Stripe's events published \(outcome.second?.recovered ?? -1) again") }
        let held = try await balance()
        if held != 200 { outcome.violations.append("the web player holds \(held) coins after one of three packs was refunded, expected 200") }
        say("fifth act: a web player's coins and ad-free through Stripe Checkout; a refund whose webhook was lost, reconciled; a dispute by webhook")
        return outcome
    }

    /// The purchase the pipeline records for a session's one line item.
    static func key(_ session: StripeAPIStandIn.Session) -> PurchaseKey {
        PurchaseKey(store: .stripe, transactionId: StripeVerifiedCheckout.transactionId(session: session.id, lineItem: session.lineItems[0].id))
    }

    /// One webhook delivery of `body` to the ingest's `POST /v1/stripe/webhooks` with `signature` as its `Stripe-Signature`:
    /// the status it was answered (0: none).
    static func deliver(_ body: Data, signature: String, to ingest: String) async -> Int {
        let request = HTTPClient.Request(method: "POST", url: ingest + "/v1/stripe/webhooks",
                                         headers: [("Stripe-Signature", signature), ("Content-Type", "application/json")], body: Array(body))
        switch await HTTPClient(timeout: .seconds(30)).send(request) {
        case .success(let response): return response.status
        case .failure: return 0
        }
    }
}

import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import StageTestSupport
import Stages
import StoreFixtures
import StoreVerification
import Testing
import TestSupport
import WorkerApp

extension PipelineTests {
    /// Web coins, ad-free and a monthly pass, by Stripe price id.
    static let webEventsCatalog = #"{"stripe": {"price_coins100": {"type": "consumable", "currency": "coins", "amount": 100},"#
        + #" "price_adfree": {"type": "nonConsumable", "entitlement": "adfree"}, "price_pass": {"type": "autoRenewable", "entitlement": "pass"}}}"#

    /// Four web purchases granted, then what Stripe decided about them, told one way or the other. What is checked after
    /// the events are handled: a quarter of the coins refunded taken back, the ad-free of a lost dispute revoked, the coins
    /// of a won dispute back where they were, the pass of a cancelled subscription ended.
    struct StripeDecisions {
        let api: StripeAPIStandIn
        let pipeline: Pipeline
        let refunded: StripeAPIStandIn.Session, lost: StripeAPIStandIn.Session, won: StripeAPIStandIn.Session, cancelled: StripeAPIStandIn.Session

        static func start(servers: String) async throws -> StripeDecisions {
            func session(_ user: String, _ price: String, mode: String = "payment") -> StripeAPIStandIn.Session {
                .init(mode: mode, clientReferenceId: user, lineItems: [.init(priceId: price, productId: "prod_\(price)", unitAmount: 1000, recurring: mode == "subscription")],
                      currentPeriodEnd: mode == "subscription" ? Date().addingTimeInterval(30 * 86_400) : nil)
            }
            let refunded = session("web-r", "price_coins100"), lost = session("web-l", "price_adfree"), won = session("web-w", "price_coins100")
            let cancelled = session("web-s", "price_pass", mode: "subscription")
            let api = try StripeAPIStandIn(sessions: [refunded, lost, won, cancelled])
            let pipeline = try await PipelineTests.start(servers: servers, pki: try TestPKI.make(), storeURL: try await StoreEngine.sqlite.freshURL(), stripe: api,
                                                         sellsOnTheAppStore: false, catalog: PipelineTests.webEventsCatalog)
            let decisions = StripeDecisions(api: api, pipeline: pipeline, refunded: refunded, lost: lost, won: won, cancelled: cancelled)
            try await decisions.send(try [refunded, lost, won, cancelled].map { session in
                try pipeline.codec.message(PurchaseSubmitted(store: .stripe, kind: .stripeCheckout, stripe: .init(checkoutSessionId: session.id),
                                                             userId: UserID(session.clientReferenceId ?? ""), submittedAt: Date(), source: .server,
                                                             submissionId: UUID().uuidString.lowercased()), time: Date())
            })
            try await waitUntil("the four purchases granted") {
                let balances = (try await pipeline.store.balances(of: "web-r"), try await pipeline.store.balances(of: "web-w"))
                let entitlements = (try await pipeline.store.entitlements(of: "web-l"), try await pipeline.store.entitlements(of: "web-s"))
                return balances.0 == ["coins": 100] && balances.1 == ["coins": 100] && entitlements.0.keys.contains("adfree") && entitlements.1.keys.contains("pass")
            }
            return decisions
        }

        func send(_ messages: [KafkaProducerMessage]) async throws {
            let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": try TestServices.requireBrokers()])))
            for result in await producer.send(contentsOf: messages) { _ = try result.get() }
            await producer.shutdown()
        }

        /// Stripe decides: a quarter of one charge refunded, a dispute lost, a dispute won, a subscription cancelled. The
        /// events' ids, oldest first.
        func decide() async throws -> [String] {
            _ = try await StripeAPIClient(configuration: .init(baseURL: api.baseURL, secretKey: api.secretKey))
                .refund(paymentIntent: refunded.paymentIntentId ?? "", amount: 250, idempotencyKey: UUID().uuidString).get()
            var ids = [try #require(api.eventIds.last)]
            let past = Date().addingTimeInterval(-120)
            func dispute(_ session: StripeAPIStandIn.Session, _ status: String) -> [String: JSONValue] {
                ["id": .string("dp_" + session.id.suffix(12)), "object": .string("dispute"), "charge": .string(api.charge(paymentIntent: session.paymentIntentId ?? "")?.id ?? ""),
                 "payment_intent": .string(session.paymentIntentId ?? ""), "amount": .integer(1000), "currency": .string("usd"), "status": .string(status)]
            }
            ids.append(api.emit(type: "charge.dispute.created", object: dispute(lost, "needs_response"), created: past))
            ids.append(api.emit(type: "charge.dispute.closed", object: dispute(lost, "lost"), created: past.addingTimeInterval(30)))
            ids.append(api.emit(type: "charge.dispute.created", object: dispute(won, "needs_response"), created: past))
            ids.append(api.emit(type: "charge.dispute.closed", object: dispute(won, "won"), created: past.addingTimeInterval(30)))
            ids.append(api.emit(type: "customer.subscription.deleted", object: [
                "id": .string(cancelled.subscriptionId ?? ""), "object": .string("subscription"), "status": .string("canceled"),
                "customer": .string("cus_web_s")], created: past.addingTimeInterval(40)))
            return ids
        }

        /// Waits for every decision carried out, then checks each was carried out once.
        func expectCarriedOut() async throws {
            let store = pipeline.store
            func state(_ session: StripeAPIStandIn.Session) async throws -> PurchaseState? {
                try await store.purchase(PurchaseKey(store: .stripe, transactionId: StripeVerifiedCheckout.transactionId(session: session.id, lineItem: session.lineItems[0].id)))?.state
            }
            try await waitUntil("each decision carried out") {
                let (pass, adfree) = (try await store.entitlements(of: "web-s"), try await store.entitlements(of: "web-l"))
                let (coins, wonState, lostState) = (try await store.balances(of: "web-r"), try await state(won), try await state(lost))
                return pass["pass"] == nil && adfree["adfree"] == nil && coins == ["coins": 75] && wonState != .revoked && lostState == .revoked
            }
            // The won dispute: revoked when it opened, given back when it closed (announced as a re-grant), once.
            let granted = try await StageFixtures.events(ItemGranted.self, atLeast: 5, at: try TestServices.requireBrokers(), codec: pipeline.codec).map(\.event)
            #expect(granted.filter { $0.reinstated == true }.map(\.userId) == ["web-w"], "\(granted.map { ($0.userId, $0.reinstated) })")
            #expect(try await store.balances(of: "web-w") == ["coins": 100], "the won dispute's coins back, once")
            #expect(try await store.balances(of: "web-r") == ["coins": 75], "a quarter refunded: a quarter taken back, once")
            #expect(try await state(refunded) == .revoked)
        }

        func reconcile() async throws -> StoreReconciler<ContinuousClock>.Pass {
            let sweeper = try WorkerApp.embedded(command: "iap-sweeper", settings: Workers.sweeperSettings, arguments: ["--kafka", "log_level=3"],
                                                 variables: pipeline.variables, store: pipeline.store)
            let reconciler = try #require(try Workers.sweeperServices(sweeper).reconciler)
            return try #require(try await reconciler.reconcileOnce()["stripe"])
        }
    }

    /// Stripe's decisions whose webhooks were all lost (only `GET /v1/events` lists them) are each carried out once by one
    /// reconciliation pass; a second pass publishes nothing.
    @Test func stripeDecisionsWhoseWebhooksWereLostAreCarriedOutOnceByOneReconciliationPass() async throws {
        let decisions = try await StripeDecisions.start(servers: try TestServices.requireBrokers())
        let ids = try await decisions.decide()
        let first = try await decisions.reconcile()
        #expect(first.completed && first.recovered == ids.count, "every decision published once: \(first)")
        try await decisions.expectCarriedOut()
        let second = try await decisions.reconcile()
        #expect(second.completed && second.listed == ids.count && second.recovered == 0, "handled already: \(second)")
        try await decisions.expectCarriedOut()
        try await decisions.pipeline.stop()
    }

    /// The same decisions delivered by webhook, each twice (Stripe retries what it was not answered): carried out once;
    /// a reconciliation pass after them publishes nothing (the same event, by Stripe's id).
    @Test func stripeDecisionsDeliveredByWebhookAreCarriedOutOnce() async throws {
        let decisions = try await StripeDecisions.start(servers: try TestServices.requireBrokers())
        let ids = try await decisions.decide()
        var messages: [KafkaProducerMessage] = []
        for id in ids {
            // As the ingest publishes a delivery (`IngestAPI.stripeEvent`): the body's text, Stripe's id, keyed by the purchase.
            let body = try #require(decisions.api.eventBody(id))
            let event = try #require(StripeEvent(json: body))
            let received = StoreNotificationReceived(stripeEvent: String(decoding: body, as: UTF8.self), eventId: event.id, subject: event.purchaseSubject,
                                                     receivedAt: Date())
            messages += [try decisions.pipeline.codec.message(received, time: Date()), try decisions.pipeline.codec.message(received, time: Date())]
        }
        try await decisions.send(messages)
        try await decisions.expectCarriedOut()
        let pass = try await decisions.reconcile()
        #expect(pass.completed && pass.listed == ids.count && pass.recovered == 0, "the webhooks' events are the listed ones: \(pass)")
        try await decisions.pipeline.stop()
    }
}

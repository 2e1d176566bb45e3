import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import StoreFixtures
import Testing
import TestSupport
import WorkerApp

extension PipelineTests {
    /// A catalog that sells only on the web: coins and an ad-free entitlement, by Stripe price id.
    static let webCatalog = #"{"stripe": {"price_coins100": {"type": "consumable", "currency": "coins", "amount": 100},"#
        + #" "price_adfree": {"type": "nonConsumable", "entitlement": "adfree"}}}"#

    /// A web-only deployment: no App Store, Google Play or AppCoins setting, only a Stripe key and a catalog of Stripe
    /// prices. A paid Checkout Session is read back from Stripe, granted once however often it is submitted, and finished
    /// as its type says; a session made for another user, one still unpaid, one never completed and one of a price no
    /// app sells are each answered with their reason; nothing is sent to a store not configured.
    @Test func aWebOnlyDeploymentGrantsPaidCheckoutSessionsOnce() async throws {
        let servers = try TestServices.requireBrokers()
        func session(_ user: String, _ price: String, status: String = "complete", payment: String = "paid", quantity: Int = 1) -> StripeAPIStandIn.Session {
            .init(status: status, paymentStatus: payment, clientReferenceId: user,
                  lineItems: [.init(priceId: price, productId: "prod_\(price)", quantity: quantity, unitAmount: 499)], paymentIntentId: StripeAPIStandIn.newID("pi"))
        }
        let coins = session("web-1", "price_coins100", quantity: 3), adfree = session("web-1", "price_adfree")
        let stolen = session("web-2", "price_coins100"), unpaid = session("web-1", "price_coins100", payment: "unpaid")
        let open = session("web-1", "price_coins100", status: "open", payment: "unpaid"), foreign = session("web-1", "price_other")
        let api = try StripeAPIStandIn(sessions: [coins, adfree, stolen, unpaid, open, foreign])
        let pipeline = try await Self.start(servers: servers, pki: try TestPKI.make(), storeURL: try await StoreEngine.sqlite.freshURL(), stripe: api,
                                            sellsOnTheAppStore: false, catalog: Self.webCatalog)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        let rejections = Recorder()
        let watcher = RunningConsumer(try KafkaConsumer(configuration: .init(
            kafka: testConsumerKafka(servers), groupID: uniqueName("w"), topics: [pipeline.codec.topic(.purchaseRejected)]))) { await rejections.record($0) }
        func submission(_ session: StripeAPIStandIn.Session, by user: UserID = "web-1") throws -> KafkaProducerMessage {
            try pipeline.codec.message(PurchaseSubmitted(store: .stripe, kind: .stripeCheckout, stripe: .init(checkoutSessionId: session.id), userId: user,
                                                         submittedAt: Date(), source: .server, submissionId: UUID().uuidString.lowercased()), time: Date())
        }
        let submissions = try [submission(coins), submission(coins), submission(adfree), submission(stolen), submission(unpaid), submission(open),
                               submission(foreign)]
        for result in await producer.send(contentsOf: submissions) { _ = try result.get() }

        let coinsKey = PurchaseKey(store: .stripe, transactionId: TransactionID(coins.id + "." + coins.lineItems[0].id))
        let adfreeKey = PurchaseKey(store: .stripe, transactionId: TransactionID(adfree.id + "." + adfree.lineItems[0].id))
        try await waitUntil("the coins granted, the entitlement finished at its grant") {
            let (coinsState, adfreeState) = (try await pipeline.store.purchase(coinsKey)?.state, try await pipeline.store.purchase(adfreeKey)?.state)
            return coinsState == .granted && adfreeState == .finished
        }
        #expect(try await pipeline.store.balances(of: "web-1") == ["coins": 300], "three of the pack, granted once for two submissions")
        #expect(try await pipeline.store.entitlements(of: "web-1").keys.contains("adfree"))
        try await waitUntil("four submissions answered") { await rejections.messages.count >= 4 }
        let reasons = await rejections.messages.compactMap { $0.value.flatMap { JSONValue.parse(Array($0))?.objectValue } }
            .map { "\($0["reason"]?.stringValue ?? "") \($0["retryable"]?.boolValue ?? false)" }.sorted()
        #expect(reasons == ["purchaseNotCompleted false", "purchasePending true", "wrongPackage false", "wrongUser false"], "\(reasons)")

        // The app reports the coins consumed: finished, as any consumable.
        for result in await producer.send(contentsOf: [try pipeline.codec.message(PurchaseConsumed(
            store: .stripe, transactionId: coinsKey.transactionId, userId: "web-1", consumedAt: Date()), time: Date())]) { _ = try result.get() }
        try await waitUntil("the consumed coins finished") { try await pipeline.store.purchase(coinsKey)?.state == .finished }
        try await watcher.stop()
        try await pipeline.stop()
    }
}

import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import StoreFixtures
import Testing
import TestSupport
import WorkerApp

extension PipelineTests.Pipeline {
    /// A submission of a Google Play purchase of `com.example.coins`, its purchase data signed with `signer` (the app's
    /// licensing key by default).
    func googlePlaySubmission(token: String, product: String = "coins.100", user: UserID, package: String = "com.example.coins",
                              signer: GooglePlaySigner? = nil) throws -> KafkaProducerMessage {
        let signed = try (signer ?? googlePlay).sign(packageName: package, productId: product, purchaseToken: token, orderId: "GPA.\(token)")
        return try codec.message(PurchaseSubmitted(store: .googleplay, kind: .googlePlayPurchase,
                                                   googleplay: .init(packageName: PackageName(package), productId: ProductID(product), purchaseToken: PurchaseToken(token),
                                                                     purchaseData: signed.purchaseData, signature: signed.signature),
                                                   userId: user, submittedAt: Date(), source: .client), time: Date())
    }
}

extension PipelineTests {
    /// Google Play one-time products through the workers as they are assembled, the Android Publisher API and its token
    /// endpoint played by the stand-in: a consumable is consumed and an entitlement acknowledged once, after its grant and
    /// through repeats; a pending payment is granted once it settles; what Google does not know, no longer knows or did
    /// not sign is refused with its reason; an access token the API stops accepting is replaced; what Google voids is revoked.
    @Test func googlePlayPurchasesAreConsumedOrAcknowledgedOnceAfterTheirGrant() async throws {
        let servers = try TestServices.requireBrokers()
        func purchase(_ token: String, _ product: ProductID = "coins.100", state: Int = 0) -> GooglePlayAPIStandIn.Purchase {
            .init(packageName: "com.example.coins", productId: product, orderId: TransactionID("GPA.\(token)"), purchaseState: state)
        }
        let api = try GooglePlayAPIStandIn(purchases: [
            "gp-coins": purchase("gp-coins"), "gp-adfree": purchase("gp-adfree", "adfree"), "gp-pending": purchase("gp-pending", state: 2),
            "gp-gone": purchase("gp-gone"), "gp-forged": purchase("gp-forged"),
        ])
        api.invalidate("gp-gone")
        let pipeline = try await Self.start(servers: servers, pki: try TestPKI.make(), storeURL: try await StoreEngine.sqlite.freshURL(),
                                            googlePlay: api, pendingRecheck: .seconds(2))
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        let rejections = Recorder(), finishes = Recorder()
        let watchers = [
            RunningConsumer(try KafkaConsumer(configuration: .init(
                kafka: testConsumerKafka(servers), groupID: uniqueName("w"), topics: [pipeline.codec.topic(.purchaseRejected)]))) { await rejections.record($0) },
            RunningConsumer(try KafkaConsumer(configuration: .init(
                kafka: testConsumerKafka(servers), groupID: uniqueName("w"), topics: [pipeline.codec.topic(.transactionFinished)]))) { await finishes.record($0) },
        ]
        // One user, so one partition: the pending purchase must not hold the purchases behind it.
        let submissions = [
            try pipeline.googlePlaySubmission(token: "gp-pending", user: "android-1"),
            try pipeline.googlePlaySubmission(token: "gp-coins", user: "android-1"),
            try pipeline.googlePlaySubmission(token: "gp-coins", user: "android-1"), // the app retrying
            try pipeline.googlePlaySubmission(token: "gp-adfree", product: "adfree", user: "android-1"),
            try pipeline.googlePlaySubmission(token: "gp-gone", user: "android-1"),
            try pipeline.googlePlaySubmission(token: "gp-unknown", user: "android-1"),
            try pipeline.googlePlaySubmission(token: "gp-forged", user: "android-1", signer: try GooglePlaySigner()),
            try pipeline.googlePlaySubmission(token: "gp-coins", user: "android-1", package: "com.attacker.app"),
        ]
        for result in await producer.send(contentsOf: submissions) { _ = try result.get() }
        let coins = PurchaseKey(store: .googleplay, transactionId: "GPA.gp-coins"), adfree = PurchaseKey(store: .googleplay, transactionId: "GPA.gp-adfree")
        try await waitUntil("the consumable and the entitlement are finished") {
            let (coinsState, adfreeState) = (try await pipeline.store.purchase(coins)?.state, try await pipeline.store.purchase(adfree)?.state)
            return coinsState == .finished && adfreeState == .finished
        }
        #expect(api.consumeCount("gp-coins") == 1 && api.acknowledgeCount("gp-coins") == 0, "a consumable is consumed, once")
        #expect(api.acknowledgeCount("gp-adfree") == 1 && api.consumeCount("gp-adfree") == 0, "an entitlement is acknowledged, once")
        try await waitUntil("five rejections answered") { await rejections.messages.count >= 5 }
        let reasons = await rejections.messages.compactMap { $0.value.flatMap { JSONValue.parse(Array($0))?.objectValue } }
            .map { ($0["reason"]?.stringValue ?? "", $0["retryable"]?.boolValue ?? false) }
        #expect(reasons.map(\.0).sorted() == ["badSignature", "purchasePending", "storeRejected", "storeRejected", "wrongPackage"], "\(reasons)")
        #expect(reasons.first { $0.0 == "purchasePending" }?.1 == true)

        // Google stops accepting the access token; the payment settles. The re-check obtains a new token, grants and consumes.
        api.expireTokens()
        let tokensBefore = api.tokenRequests
        api.set("gp-pending", purchase("gp-pending"))
        let pending = PurchaseKey(store: .googleplay, transactionId: "GPA.gp-pending")
        try await waitUntil("the settled purchase is granted and consumed") { try await pipeline.store.purchase(pending)?.state == .finished }
        #expect(api.consumeCount("gp-pending") == 1)
        #expect(api.tokenRequests > tokensBefore, "a 401 obtained a new access token")
        // A repeat is answered again (the same `ce_id`), so the count of messages says nothing: wait for each purchase.
        func finishedPurchases() async -> Set<String> {
            Set(await finishes.messages.compactMap { $0.value.flatMap { JSONValue.parse(Array($0))?.objectValue } }
                .map { "\($0["transactionId"]?.stringValue ?? "") \($0["method"]?.stringValue ?? "")" })
        }
        try await waitUntil("three transactions finished") { await finishedPurchases().count >= 3 }

        // Google refunds the coins after their finish and no notification tells of it: the sweeper's pass over the app's
        // voided purchases revokes them, and a second pass changes nothing.
        api.void("gp-coins", at: Date().addingTimeInterval(-1))
        let sweeper = try WorkerApp.embedded(command: "iap-sweeper", settings: Workers.sweeperSettings, arguments: ["--kafka", "log_level=3"],
                                             variables: pipeline.variables, store: pipeline.store)
        let reconciler = try #require(try Workers.sweeperServices(sweeper).reconciler, "a Google Play app is configured: it reconciles")
        let pass = try #require(try await reconciler.reconcileOnce()["googleplay:com.example.coins"])
        #expect(pass.completed && pass.recovered == 1, "\(pass)")
        try await waitUntil("the voided coins are revoked") { try await pipeline.store.purchase(coins)?.state == .revoked }
        #expect(try await reconciler.reconcileOnce()["googleplay:com.example.coins"]?.recovered == 0)
        for watcher in watchers { try await watcher.stop() }
        try await pipeline.stop()
        // Each purchase was finished through the API.
        let finished = await finishedPurchases()
        #expect(finished == ["GPA.gp-coins googlePlayAPI", "GPA.gp-adfree googlePlayAPI", "GPA.gp-pending googlePlayAPI"], "\(finished)")
        #expect(try await pipeline.store.balances(of: "android-1") == ["coins": 100], "the pending purchase's; the voided one's clawed back")
        #expect(try await pipeline.store.entitlements(of: "android-1").keys.contains("adfree"))
        #expect(api.consumeCount("gp-coins") == 1, "the repeat submission changed nothing")
    }
}

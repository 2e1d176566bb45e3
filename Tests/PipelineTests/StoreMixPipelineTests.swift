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
    /// A game sold on Google Play alone: no App Store setting at all (no bundle id, no roots, no App Store API). Its workers
    /// start as assembled from their settings, its purchases are verified, granted and consumed, the sweeper reconciles its
    /// voided purchases, and what claims to be an App Store purchase is refused with its reason, not a crash or a wait.
    @Test func anAndroidOnlyDeploymentSellsWithNoAppStoreSetting() async throws {
        let servers = try TestServices.requireBrokers()
        let api = try GooglePlayAPIStandIn(purchases: [
            "gp-only": .init(packageName: "com.example.coins", productId: "coins.100", orderId: "GPA.gp-only", purchaseState: 0),
        ])
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await StoreEngine.sqlite.freshURL(), googlePlay: api,
                                            sellsOnTheAppStore: false)
        #expect(pipeline.variables["IAP_BUNDLE_ID"] == nil && pipeline.variables["IAP_APPSTORE_API_URL"] == nil)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        let rejections = Recorder()
        let watcher = RunningConsumer(try KafkaConsumer(configuration: .init(
            kafka: testConsumerKafka(servers), groupID: uniqueName("w"), topics: [pipeline.codec.topic(.purchaseRejected)]))) { await rejections.record($0) }
        let signed = try JWSSigner(pki: pki).sign(AppStorePayloads.transaction(transactionId: "9100001", productId: "coins.100", bundleId: Self.bundle))
        let submissions = [
            try pipeline.googlePlaySubmission(token: "gp-only", user: "android-7"),
            try pipeline.codec.message(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: signed, userId: "android-7",
                                                         submittedAt: Date(), source: .client), time: Date()),
        ]
        for result in await producer.send(contentsOf: submissions) { _ = try result.get() }
        let key = PurchaseKey(store: .googleplay, transactionId: "GPA.gp-only")
        try await waitUntil("the Google Play purchase is consumed and finished") { try await pipeline.store.purchase(key)?.state == .finished }
        #expect(api.consumeCount("gp-only") == 1)
        #expect(try await pipeline.store.balances(of: "android-7") == ["coins": 100])
        try await waitUntil("the App Store submission is answered") { await !rejections.messages.isEmpty }
        let answer = try #require(await rejections.messages.first?.value.flatMap { JSONValue.parse(Array($0))?.objectValue })
        #expect(answer["reason"]?.stringValue == "storeRejected" && answer["retryable"]?.boolValue == false, "\(answer)")
        #expect(answer["detail"]?.stringValue?.contains("the App Store is not configured") == true, "\(answer)")

        // The sweeper of the same settings reconciles Google Play's voided purchases, and nothing of the App Store's.
        let sweeper = try WorkerApp.embedded(command: "iap-sweeper", settings: Workers.sweeperSettings, arguments: ["--kafka", "log_level=3"],
                                             variables: pipeline.variables, store: pipeline.store)
        let reconciler = try #require(try Workers.sweeperServices(sweeper).reconciler)
        let passes = try await reconciler.reconcileOnce()
        #expect(passes.keys.sorted() == ["googleplay:com.example.coins"], "\(passes.keys)")
        try await watcher.stop()
        try await pipeline.stop()
    }
}

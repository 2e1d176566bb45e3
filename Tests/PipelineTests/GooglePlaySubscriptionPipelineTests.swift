import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import StageTestSupport
import StoreFixtures
import StoreVerification
import Testing
import TestSupport
import WorkerApp

extension PipelineTests {
    /// A Google Play subscription through the workers, `subscriptionsv2` played by the stand-in: the signup is granted
    /// until its expiry and acknowledged once; a renewal (a new order of the same token, seen when the app submits the
    /// purchase again) extends it; a cancellation leaves the period paid for; an upgrade (a new token naming the old one as
    /// `linkedPurchaseToken`) continues the subscription and ends the old period at its start; a pending signup waits.
    @Test func googlePlaySubscriptionsAreGrantedUntilTheirExpiryRenewedAndUpgraded() async throws {
        let servers = try TestServices.requireBrokers()
        let start = Date().addingTimeInterval(-60)
        func subscription(_ product: ProductID, order: String?, expiresIn days: Double, state: String = "SUBSCRIPTION_STATE_ACTIVE",
                          acknowledged: Bool = false, linked: PurchaseToken? = nil, startTime: Date? = nil) -> GooglePlayAPIStandIn.Subscription {
            .init(packageName: "com.example.coins", productId: product, state: state, latestOrderId: order.map { TransactionID($0) }, startTime: startTime ?? start,
                  expiryTime: Date().addingTimeInterval(days * 86_400), acknowledged: acknowledged, linkedPurchaseToken: linked)
        }
        let api = try GooglePlayAPIStandIn(purchases: [:])
        api.set("sub-1", subscription("pass.monthly", order: "GPA.1111..0", expiresIn: 30))
        api.set("sub-pending", subscription("pass.monthly", order: nil, expiresIn: 30, state: "SUBSCRIPTION_STATE_PENDING"))
        let pipeline = try await Self.start(servers: servers, pki: try TestPKI.make(), storeURL: try await StoreEngine.sqlite.freshURL(),
                                            googlePlay: api, pendingRecheck: .seconds(60))
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        func submit(_ token: String, _ product: String = "pass.monthly", user: UserID = "android-s") async throws {
            for result in await producer.send(contentsOf: [try pipeline.googlePlaySubmission(token: token, product: product, user: user)]) { _ = try result.get() }
        }
        func state(_ order: TransactionID) async throws -> PurchaseState? { try await pipeline.store.purchase(PurchaseKey(store: .googleplay, transactionId: order))?.state }
        func passUntil() async throws -> Date?? { try await pipeline.store.entitlements(of: "android-s")["pass"] }

        try await submit("sub-pending")
        try await submit("sub-1")
        try await waitUntil("the signup is granted and acknowledged") { try await state("GPA.1111..0") == .finished }
        #expect(api.subscriptionAcknowledgeCount("sub-1") == 1)
        let firstExpiry = try #require(api.subscription("sub-1")?.expiryTime)
        #expect(try await passUntil().flatMap { $0 }.map { abs($0.timeIntervalSince(firstExpiry)) < 1 } == true, "granted until its expiry")
        #expect(try await pipeline.store.purchase(PurchaseKey(store: .googleplay, transactionId: "GPA.1111..0"))?.originalTransactionId == "sub-1")
        #expect(try await state("sub-pending") == nil, "a pending signup is not recorded")

        // Renewed: Google charged the next period (a new order); the app submits the purchase again.
        api.set("sub-1", subscription("pass.monthly", order: "GPA.1111..1", expiresIn: 60, acknowledged: true))
        try await submit("sub-1")
        try await waitUntil("the renewal is granted and finished") { try await state("GPA.1111..1") == .finished }
        let renewedExpiry = try #require(api.subscription("sub-1")?.expiryTime)
        #expect(try await passUntil().flatMap { $0 }.map { abs($0.timeIntervalSince(renewedExpiry)) < 1 } == true, "extended to the renewal's expiry")
        #expect(api.subscriptionAcknowledgeCount("sub-1") == 1, "the signup's acknowledgement covers its renewals")

        // Canceled: it will not renew, and the period paid for stays.
        api.set("sub-1", subscription("pass.monthly", order: "GPA.1111..1", expiresIn: 60, state: "SUBSCRIPTION_STATE_CANCELED", acknowledged: true))
        try await submit("sub-1")
        // Upgraded to gold: a new token naming the old one. Gold is granted; the pass ends at gold's start.
        api.set("sub-2", subscription("gold.monthly", order: "GPA.2222..0", expiresIn: 30, linked: "sub-1", startTime: Date().addingTimeInterval(-1)))
        try await submit("sub-2", "gold.monthly")
        try await waitUntil("the upgrade is granted and acknowledged") { try await state("GPA.2222..0") == .finished }
        #expect(try await pipeline.store.purchase(PurchaseKey(store: .googleplay, transactionId: "GPA.2222..0"))?.originalTransactionId == "sub-1",
                "the upgrade continues the subscription it replaced")
        let held = try await pipeline.store.entitlements(of: "android-s")
        #expect(held.keys.sorted() == ["gold"], "the pass ended at the upgrade: \(held)")
        #expect(api.subscriptionAcknowledgeCount("sub-2") == 1)
        try await pipeline.stop()
    }
}

extension PipelineTests {
    /// Google Play's real-time developer notifications, as the ingest publishes them, through the workers: each is a hint
    /// the verifier reads the purchase again for. A renewal nobody submitted is granted to the subscription's owner; a
    /// one-time purchase nobody submitted is kept unclaimed until the app's submission claims it; a voided order is
    /// revoked, and the voided-purchases list then publishes it no more.
    @Test func googlePlayNotificationsRenewRecordAndRevokeWhatTheyTellOf() async throws {
        let servers = try TestServices.requireBrokers()
        let start = Date().addingTimeInterval(-60)
        func period(_ order: String, expiresIn days: Double) -> GooglePlayAPIStandIn.Subscription {
            .init(packageName: "com.example.coins", productId: "pass.monthly", latestOrderId: TransactionID(order), startTime: start,
                  expiryTime: Date().addingTimeInterval(days * 86_400), acknowledged: order.hasSuffix("..1"))
        }
        let api = try GooglePlayAPIStandIn(purchases: [
            "gp-unclaimed": .init(packageName: "com.example.coins", productId: "coins.100", orderId: "GPA.4444-unclaimed"),
        ])
        api.set("sub-n", period("GPA.3333..0", expiresIn: 30))
        let pipeline = try await Self.start(servers: servers, pki: try TestPKI.make(), storeURL: try await StoreEngine.sqlite.freshURL(), googlePlay: api)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        func send(_ messages: [KafkaProducerMessage]) async throws { for result in await producer.send(contentsOf: messages) { _ = try result.get() } }
        func notify(_ kind: String, _ fields: [String: JSONValue], token: PurchaseToken?) async throws {
            let text = GooglePlayPushSigner.notification(package: "com.example.coins", kind, fields)
            try await send([try pipeline.codec.message(StoreNotificationReceived(developerNotification: text, purchaseToken: token, receivedAt: Date()),
                                                       time: Date())])
        }
        func state(_ order: TransactionID) async throws -> PurchaseState? { try await pipeline.store.purchase(PurchaseKey(store: .googleplay, transactionId: order))?.state }

        try await send([try pipeline.googlePlaySubmission(token: "sub-n", product: "pass.monthly", user: "android-n")])
        try await waitUntil("the signup is finished") { try await state("GPA.3333..0") == .finished }

        // Renewed, and only a notification tells of it.
        api.set("sub-n", period("GPA.3333..1", expiresIn: 60))
        try await notify("subscriptionNotification", ["version": .string("1.0"), "notificationType": .integer(2), "purchaseToken": .string("sub-n"),
                                                      "subscriptionId": .string("pass.monthly")], token: "sub-n")
        try await waitUntil("the renewal is granted to the subscriber and finished") { try await state("GPA.3333..1") == .finished }
        #expect(try await pipeline.store.purchase(PurchaseKey(store: .googleplay, transactionId: "GPA.3333..1"))?.userId == "android-n")
        let renewedExpiry = try #require(api.subscription("sub-n")?.expiryTime)
        #expect(try await pipeline.store.entitlements(of: "android-n")["pass"].flatMap { $0 }.map { abs($0.timeIntervalSince(renewedExpiry)) < 1 } == true)

        // A one-time purchase the app never submitted (it died after paying): kept unclaimed, then claimed by its submission.
        try await notify("testNotification", ["version": .string("1.0")], token: nil)
        try await notify("oneTimeProductNotification", ["version": .string("1.0"), "notificationType": .integer(1), "purchaseToken": .string("gp-unclaimed"),
                                                        "sku": .string("coins.100")], token: "gp-unclaimed")
        try await waitUntil("the charge is kept unclaimed") { try await state("GPA.4444-unclaimed") == .unclaimed }
        try await send([try pipeline.googlePlaySubmission(token: "gp-unclaimed", user: "android-n")])
        try await waitUntil("the app's submission claims it") { try await state("GPA.4444-unclaimed") == .finished }
        #expect(try await pipeline.store.balances(of: "android-n") == ["coins": 100])

        // Refunded: the notification revokes it; the voided list, read later, publishes it no more.
        api.void("gp-unclaimed", at: Date().addingTimeInterval(-1))
        try await notify("voidedPurchaseNotification", ["purchaseToken": .string("gp-unclaimed"), "orderId": .string("GPA.4444-unclaimed"),
                                                        "productType": .integer(2), "refundType": .integer(1)], token: "gp-unclaimed")
        try await waitUntil("the refunded coins are revoked") { try await state("GPA.4444-unclaimed") == .revoked }
        #expect(try await pipeline.store.balances(of: "android-n") == ["coins": 0])
        let sweeper = try WorkerApp.embedded(command: "iap-sweeper", settings: Workers.sweeperSettings, arguments: ["--kafka", "log_level=3"],
                                             variables: pipeline.variables, store: pipeline.store)
        let reconciler = try #require(try Workers.sweeperServices(sweeper).reconciler)
        let pass = try #require(try await reconciler.reconcileOnce()["googleplay:com.example.coins"])
        #expect(pass.listed == 1 && pass.recovered == 0, "the notification's revocation was recorded: \(pass)")
        try await pipeline.stop()
    }
}

extension PipelineTests {
    /// What each subscription state Google reports tells the subscriber's backend, through the workers: a grace period
    /// (its notification) keeps access until the grace ends and is announced as a billing issue; an account hold keeps
    /// the issue and ends the grace; a recovery is a new period granted, the issue gone; a pause says until when. And a
    /// renewal whose notification never came is found by the sweeper once the period lapsed, and granted to the
    /// subscriber through the verifier.
    @Test func googlePlaySubscriptionStatesAreAnnouncedAndALostRenewalIsFound() async throws {
        let servers = try TestServices.requireBrokers()
        let start = Date().addingTimeInterval(-60)
        func period(_ order: String, _ state: String = "SUBSCRIPTION_STATE_ACTIVE", expires: Date, resume: Date? = nil) -> GooglePlayAPIStandIn.Subscription {
            .init(packageName: "com.example.coins", productId: "pass.monthly", state: state, latestOrderId: TransactionID(order), startTime: start,
                  expiryTime: expires, acknowledged: !order.hasSuffix("..0") || state != "SUBSCRIPTION_STATE_ACTIVE", autoResumeTime: resume)
        }
        let api = try GooglePlayAPIStandIn(purchases: [:])
        let firstExpiry = Date().addingTimeInterval(86_400)
        api.set("sub-s", period("GPA.6666..0", expires: firstExpiry))
        let pipeline = try await Self.start(servers: servers, pki: try TestPKI.make(), storeURL: try await StoreEngine.sqlite.freshURL(), googlePlay: api)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        func send(_ messages: [KafkaProducerMessage]) async throws { for result in await producer.send(contentsOf: messages) { _ = try result.get() } }
        func notify(_ type: Int64) async throws {
            let text = GooglePlayDeveloperNotification.subscriptionNotificationText(packageName: "com.example.coins", type: type, purchaseToken: "sub-s",
                                                                                   productId: "pass.monthly", eventTime: Date())
            try await send([try pipeline.codec.message(StoreNotificationReceived(developerNotification: text, purchaseToken: "sub-s", receivedAt: Date()),
                                                       time: Date())])
        }
        func status() async throws -> SubscriptionStatus? { try await pipeline.store.subscriptionStatus(store: .googleplay, originalTransactionId: "sub-s") }
        func passUntil() async throws -> Date? { try await pipeline.store.entitlements(of: "android-g")["pass"].flatMap { $0 } }
        func state(_ order: TransactionID) async throws -> PurchaseState? { try await pipeline.store.purchase(PurchaseKey(store: .googleplay, transactionId: order))?.state }

        try await send([try pipeline.googlePlaySubmission(token: "sub-s", product: "pass.monthly", user: "android-g")])
        try await waitUntil("the signup is finished and its status recorded") { 
            let recorded = try await status()
            return try await state("GPA.6666..0") == .finished && recorded?.willRenew == true
        }

        // Renewing failed: Google moves the expiry to the grace period's end.
        let graceEnd = firstExpiry.addingTimeInterval(3 * 86_400)
        api.set("sub-s", period("GPA.6666..0", "SUBSCRIPTION_STATE_IN_GRACE_PERIOD", expires: graceEnd))
        try await notify(6)
        try await waitUntil("the grace period is recorded") { try await status()?.gracePeriodEndsAt.map { abs($0.timeIntervalSince(graceEnd)) < 0.001 } == true }
        try await waitUntil("access lasts until the grace ends") { try await passUntil().map { abs($0.timeIntervalSince(graceEnd)) < 1 } == true }
        let issueSince = try #require(try await status()?.billingIssueSince)

        // On hold: access ends (the expiry passed), the billing issue goes on, the grace is over.
        api.set("sub-s", period("GPA.6666..0", "SUBSCRIPTION_STATE_ON_HOLD", expires: graceEnd))
        try await notify(5)
        try await waitUntil("the hold is recorded") { try await status().map { $0.gracePeriodEndsAt == nil && $0.billingIssueSince == issueSince } == true }

        // Recovered: a new order, granted to the subscriber; the issue is gone.
        let recoveredExpiry = Date().addingTimeInterval(30 * 86_400)
        api.set("sub-s", period("GPA.6666..1", expires: recoveredExpiry))
        try await notify(1)
        try await waitUntil("the recovery is granted and its status recorded") {
            let recorded = try await status()
            return try await state("GPA.6666..1") == .finished && recorded != nil && recorded?.billingIssueSince == nil
        }

        // Paused by the customer until a month from now.
        let resume = Date().addingTimeInterval(31 * 86_400)
        api.set("sub-s", period("GPA.6666..1", "SUBSCRIPTION_STATE_PAUSED", expires: recoveredExpiry, resume: resume))
        try await notify(10)
        try await waitUntil("the pause is recorded") { try await status()?.pausedUntil.map { abs($0.timeIntervalSince(resume)) < 0.001 } == true }

        let announced = try await StageFixtures.events(SubscriptionStatusChanged.self, atLeast: 5, at: servers, codec: pipeline.codec).map(\.event)
        #expect(announced.map(\.notificationType) == [nil, "SUBSCRIPTION_IN_GRACE_PERIOD", "SUBSCRIPTION_ON_HOLD", "SUBSCRIPTION_RECOVERED",
                                                     "SUBSCRIPTION_PAUSED"], "each change announced once, in order: \(announced.map(\.changed))")
        #expect(announced.allSatisfy { $0.userId == "android-g" })

        // Renewed while the pipeline heard nothing (no notification, no submission): once the period has lapsed, the
        // sweeper asks, and the verifier grants the renewal to the subscriber.
        api.set("sub-s", period("GPA.6666..2", expires: Date().addingTimeInterval(60 * 86_400)))
        let sweeper = try WorkerApp.embedded(command: "iap-sweeper", settings: Workers.sweeperSettings,
                                             arguments: ["--kafka", "log_level=3", "--now", RFC3339.format(recoveredExpiry.addingTimeInterval(7_200))],
                                             variables: pipeline.variables, store: pipeline.store)
        try await Workers.sweeperServices(sweeper).sweeper.sweepOnce()
        try await waitUntil("the renewal nobody told of is granted and finished") { try await state("GPA.6666..2") == .finished }
        #expect(try await pipeline.store.purchase(PurchaseKey(store: .googleplay, transactionId: "GPA.6666..2"))?.userId == "android-g")
        try await pipeline.stop()
    }
}

import Foundation
import InMemoryPurchaseStore
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Testing
import WorkerRuntime

/// The reconciler reading a stand-in Android Publisher API's voided purchases over HTTP, on the in-memory repository,
/// publishing to librdkafka's in-process mock cluster: each purchase Google voided becomes one revocation, whichever pass
/// lists it (passes overlap), the configured app's only; the API's limits are kept.
@Suite struct GooglePlayVoidedReconcilerTests {
    let store = InMemoryPurchaseStore()
    let cluster: KafkaMockCluster
    let api: GooglePlayAPIStandIn

    init() throws {
        cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic(StageFixtures.codec.topic(.purchaseRevoked), partitions: 1)
        func purchase(_ token: String, package: PackageName = "com.example.coins") -> GooglePlayAPIStandIn.Purchase {
            .init(packageName: package, productId: "coins.100", orderId: TransactionID("GPA.\(token)"))
        }
        api = try GooglePlayAPIStandIn(purchases: [
            "v-1": purchase("v-1"), "v-2": purchase("v-2"), "v-3": purchase("v-3"), "v-late": purchase("v-late"), "kept": purchase("kept"),
            "other-app": purchase("other-app", package: "com.example.other"),
            "multi": .init(packageName: "com.example.coins", productId: "coins.100", orderId: "GPA.multi", quantity: 3),
        ])
        api.setVoidedPageSize(2)
    }

    func reconciler() throws -> StoreReconciler<ContinuousClock> {
        let client = AndroidPublisherClient(configuration: .init(baseURL: api.baseURL),
                                            serviceAccount: try GoogleServiceAccount(keyFile: Data(try api.serviceAccountKeyJSON().utf8)))
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": cluster.bootstrapServers])))
        return StoreReconciler(configuration: .init(callsPerSecond: 1000), histories: [GooglePlayVoidedPurchasesHistory(packageName: "com.example.coins", api: client)],
                               store: store, producer: producer,
                               context: StageContext(codec: StageFixtures.codec, logger: Logger(stage: "reconciler", minimum: .error)), clock: ContinuousClock())
    }

    func revocations(atLeast count: Int) async throws -> [PurchaseRevokedEvent] {
        try await StageFixtures.events(PurchaseRevokedEvent.self, atLeast: count, at: cluster.bootstrapServers).map(\.event)
    }

    @Test func eachVoidedPurchaseIsRevokedOnceAcrossOverlappingPasses() async throws {
        let voidedAt = Date().addingTimeInterval(-1800)
        for (index, token) in ["v-1", "v-2", "v-3", "other-app"].enumerated() {
            api.void(PurchaseToken(token), at: voidedAt.addingTimeInterval(Double(index)), reason: 7, source: 2)
        }
        let reconciler = try reconciler()
        let pass = try #require(try await reconciler.reconcileOnce()["googleplay:com.example.coins"])
        #expect(pass.completed && pass.pages == 2 && pass.listed == 3 && pass.recovered == 3, "\(pass)")
        let first = try await revocations(atLeast: 3)
        #expect(first.map(\.transactionId) == ["GPA.v-1", "GPA.v-2", "GPA.v-3"])
        #expect(first.allSatisfy { $0.store == .googleplay && $0.reason == .REFUND && $0.decidedAt != nil })
        #expect(first.first?.revocationDate.map { abs($0.timeIntervalSince(voidedAt)) < 0.01 } == true, "Google's time of the void")

        // The next pass reads the last hour again: what it published, it publishes no more; a new void is published.
        api.void("v-late", at: Date().addingTimeInterval(-1))
        let second = try #require(try await reconciler.reconcileOnce()["googleplay:com.example.coins"])
        #expect(second.listed == 4 && second.recovered == 1, "\(second)")
        #expect(try await revocations(atLeast: 4).map(\.transactionId) == ["GPA.v-1", "GPA.v-2", "GPA.v-3", "GPA.v-late"])
        #expect(reconciler.totals.calls == ["ok": 4] && reconciler.totals.recovered == ["googleplay:com.example.coins": 4], "two pages a pass")
    }

    /// A subscription order Google voided whose notification never came: listed only with `type=1`, it is revoked in one
    /// pass, its period's entitlement ends, and a second pass publishes nothing.
    @Test func aSubscriptionOrderVoidedOnlyInTheListEndsItsEntitlementInOnePass() async throws {
        let now = Date()
        let key = PurchaseKey(store: .googleplay, transactionId: "GPA.sub-1..0")
        api.set("sub-1", GooglePlayAPIStandIn.Subscription(packageName: "com.example.coins", productId: "pass.monthly", latestOrderId: key.transactionId,
                                                            startTime: now.addingTimeInterval(-86_400), expiryTime: now.addingTimeInterval(29 * 86_400),
                                                            acknowledged: true))
        _ = try await store.recordVerified(PurchaseRecord(key: key, userId: "u-sub", productId: "pass.monthly", productType: .autoRenewable, quantity: 1,
                                                          purchaseTime: now.addingTimeInterval(-86_400), originalTransactionId: key.transactionId), at: now)
        _ = try await store.grant(key, items: [.entitlement("pass", until: now.addingTimeInterval(29 * 86_400))], at: now)
        api.voidSubscription("sub-1", order: key.transactionId, at: now.addingTimeInterval(-60))

        let reconciler = try reconciler()
        let pass = try #require(try await reconciler.reconcileOnce()["googleplay:com.example.coins"])
        #expect(pass.recovered == 1, "\(pass)")
        let revoked = try #require(try await revocations(atLeast: 1).first)
        #expect(revoked.transactionId == key.transactionId && revoked.reason == .REFUND && revoked.refundedQuantity == nil)
        _ = try await GranterStageTests.granter(store, at: now).handle(try StageFixtures.message(revoked))
        #expect(try await store.entitlements(of: "u-sub", at: now).isEmpty, "the voided period's entitlement ends")
        #expect(try await store.purchase(key)?.state == .revoked)

        let second = try #require(try await reconciler.reconcileOnce()["googleplay:com.example.coins"])
        #expect(second.listed == 1 && second.recovered == 0, "\(second)")
    }

    /// A quantity-based partial refund of one of three units: listed only with `includeQuantityBasedPartialRefund=true`,
    /// with its `voidedQuantity`; the granter takes back one unit's worth of the coins, and a second pass publishes nothing.
    @Test func aPartialQuantityRefundTakesBackOnlyTheRefundedUnits() async throws {
        let now = Date()
        let key = PurchaseKey(store: .googleplay, transactionId: "GPA.multi")
        _ = try await store.recordVerified(PurchaseRecord(key: key, userId: "u-multi", productId: "coins.100", productType: .consumable, quantity: 3,
                                                          purchaseTime: now.addingTimeInterval(-3600)), at: now)
        _ = try await store.grant(key, items: [.currency("coins", 300)], at: now)
        api.voidPartially("multi", quantity: 1, at: now.addingTimeInterval(-60))

        let reconciler = try reconciler()
        let pass = try #require(try await reconciler.reconcileOnce()["googleplay:com.example.coins"])
        #expect(pass.recovered == 1, "\(pass)")
        let revoked = try #require(try await revocations(atLeast: 1).first)
        #expect(revoked.transactionId == key.transactionId && revoked.refundedQuantity == 1)
        _ = try await GranterStageTests.granter(store, at: now).handle(try StageFixtures.message(revoked))
        #expect(try await store.balances(of: "u-multi") == ["coins": 200], "one unit of three refunded: 100 of 300 coins taken back")

        let second = try #require(try await reconciler.reconcileOnce()["googleplay:com.example.coins"])
        #expect(second.listed == 1 && second.recovered == 0, "\(second)")
    }

    @Test func anAPIThatAsksToWaitIsLeftAloneUntilThenAndTheCheckpointStays() async throws {
        api.void("v-1")
        api.fail(429, retryAfter: 120)
        let reconciler = try reconciler()
        let refused = try #require(try await reconciler.reconcileOnce()["googleplay:com.example.coins"])
        #expect(!refused.completed && refused.recovered == 0)
        api.fail(nil)
        let waiting = try #require(try await reconciler.reconcileOnce()["googleplay:com.example.coins"])
        #expect(waiting.pages == 0, "the API asked for two minutes")
        #expect(reconciler.totals.calls == ["unavailable": 1])
        #expect(try await store.claimCheckpoint("googleplay.voided.com.example.coins", owner: "probe", until: Date().addingTimeInterval(60), now: Date())
                    == .claimed(position: nil), "no pass completed, so the next reads from the start again")
    }
}

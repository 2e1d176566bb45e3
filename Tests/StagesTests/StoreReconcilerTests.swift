import Crypto
import Foundation
import InMemoryPurchaseStore
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Testing
import WorkerRuntime

/// The reconciler on the in-memory repository, reading a stand-in App Store Server API's notification history over HTTP
/// and publishing to librdkafka's in-process mock cluster: what never arrived is published once, with the event id it
/// would have had; what arrived is not; the checkpoint, its lease and the API's limits are kept.
@Suite struct StoreReconcilerTests {
    let store = InMemoryPurchaseStore()
    let cluster: KafkaMockCluster
    let key: PrivateKey
    let api: AppStoreServerAPIStandIn
    let signer = JWSSigner(pki: Self.pki)
    static let pki = try! TestPKI.make(name: "reconciler")

    init() throws {
        cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic(StageFixtures.codec.topic(.storeNotification), partitions: 1)
        key = try PrivateKey.generateP256()
        api = try AppStoreServerAPIStandIn(publicKey: try key.publicKey(), keyId: "K", issuerId: "I", bundleId: StageFixtures.bundle)
        api.setHistoryPageSize(2)
    }

    func reconciler(_ configuration: StoreReconciler<ContinuousClock>.Configuration = .init(callsPerSecond: 1000)) throws
        -> StoreReconciler<ContinuousClock> {
        let client = AppStoreServerAPIClient(configuration: .init(baseURL: api.baseURL, keyId: "K", issuerId: "I", bundleId: StageFixtures.bundleID,
                                                                  privateKey: key))
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": cluster.bootstrapServers])))
        return StoreReconciler(configuration: configuration, histories: [AppStoreNotificationHistory(environment: .production, api: client)], store: store,
                                  producer: producer, context: StageContext(codec: StageFixtures.codec, logger: Logger(stage: "reconciler", minimum: .error)),
                                  clock: ContinuousClock())
    }

    /// A signed REFUND notification with id `uuid`, as the App Store lists it in its history.
    func notification(_ uuid: String, at date: Date = Date()) throws -> String {
        try signer.sign(AppStorePayloads.notification(type: .refund, uuid: uuid, bundleId: StageFixtures.bundle, appAppleId: 1,
                                                      environment: .production, signedTransactionInfo: nil, signedDate: date))
    }

    /// The `store.notification` events published so far, in order, each with the event id the ingest gives it.
    func published(atLeast count: Int) async throws -> [StoreNotificationReceived] {
        try await StageFixtures.events(StoreNotificationReceived.self, atLeast: count, at: cluster.bootstrapServers).map { event, message in
            #expect(message.header("ce_id") == event.eventID, "the event id the notification has when the ingest publishes it")
            return event
        }
    }

    @Test func aNotificationThatNeverArrivedIsPublishedOnceAndOneThatArrivedIsNot() async throws {
        let payloads = try ["n-1", "n-2", "n-3"].enumerated().map { index, uuid in
            let sent = Date().addingTimeInterval(-1800 + Double(index))
            let payload = try notification(uuid, at: sent)
            api.recordNotification(payload, at: sent)
            return payload
        }
        try await store.recordNotificationSeen("n-2", type: "REFUND", at: Date()) // delivered and handled
        let reconciler = try reconciler()
        let pass = try #require(try await reconciler.reconcileOnce()["Production"])
        #expect(pass.pages == 2 && pass.listed == 3 && pass.recovered == 2 && pass.completed)
        let published = try await published(atLeast: 2)
        #expect(published.map(\.content) == [payloads[0], payloads[2]], "the lost ones, in the order the store sent them")

        // The verifier handles them; the next pass reads the same span again (the overlap) and publishes nothing.
        for uuid in ["n-1", "n-3"] { try await store.recordNotificationSeen(NotificationID(uuid), type: "REFUND", at: Date()) }
        let again = try #require(try await reconciler.reconcileOnce()["Production"])
        #expect(again.listed == 3 && again.recovered == 0)
        #expect(reconciler.totals.recovered == ["Production": 2] && reconciler.totals.calls["ok"] == 4)
    }

    /// The first pass reads back its lookback; the next from its checkpoint less the overlap: a notification the store
    /// lists late (sent before the first pass, listed after it) is still found, one older than the lookback is not.
    @Test func passesReadFromTheCheckpointLessTheOverlap() async throws {
        api.recordNotification(try notification("too-old", at: Date().addingTimeInterval(-8 * 86_400)), at: Date().addingTimeInterval(-8 * 86_400))
        api.recordNotification(try notification("recent", at: Date().addingTimeInterval(-2 * 86_400)), at: Date().addingTimeInterval(-2 * 86_400))
        let reconciler = try reconciler()
        #expect(try await reconciler.reconcileOnce()["Production"]?.recovered == 1)
        api.recordNotification(try notification("late", at: Date().addingTimeInterval(-1800)), at: Date().addingTimeInterval(-1800))
        try await store.recordNotificationSeen("recent", type: "REFUND", at: Date())
        let second = try #require(try await reconciler.reconcileOnce()["Production"])
        #expect(second.listed == 1 && second.recovered == 1, "only the span since the checkpoint, less the overlap")
        #expect(try await published(atLeast: 2).compactMap { StoreReconcilerTests.uuid(of: $0.content) } == ["recent", "late"])
    }

    /// A checkpoint older than the history Apple keeps starts the read at the oldest it keeps (Apple refuses earlier).
    @Test func aReadNeverStartsBeforeTheHistoryTheStoreKeeps() async throws {
        let long = Date().addingTimeInterval(-400 * 86_400)
        _ = try await store.claimCheckpoint("appstore.notifications.Production", owner: "old", until: long.addingTimeInterval(60), now: long)
        _ = try await store.advanceCheckpoint("appstore.notifications.Production", owner: "old", to: long, now: long)
        api.recordNotification(try notification("kept"), at: Date().addingTimeInterval(-100 * 86_400))
        let pass = try #require(try await reconciler().reconcileOnce()["Production"])
        #expect(pass.completed && pass.recovered == 1, "\(pass)")
    }

    @Test func aHistoryAnotherReplicaReadsIsLeftToIt() async throws {
        api.recordNotification(try notification("n-1"))
        _ = try await store.claimCheckpoint("appstore.notifications.Production", owner: "other", until: Date().addingTimeInterval(300), now: Date())
        let pass = try #require(try await reconciler().reconcileOnce()["Production"])
        #expect(pass.skipped && pass.pages == 0)
        #expect(api.requests.isEmpty, "the API is not asked")
    }

    /// Rate limited: the pass stops where it is (the checkpoint stays), and no call is made before the time the API named.
    @Test func aRateLimitedPassStopsAndWaitsAsTheAPIAsks() async throws {
        for index in 0..<3 { api.recordNotification(try notification("n-\(index)")) }
        let reconciler = try reconciler()
        api.fail(.init(status: 429, times: 1, retryAfterSeconds: 60))
        let limited = try #require(try await reconciler.reconcileOnce()["Production"])
        #expect(!limited.completed && limited.recovered == 0 && reconciler.totals.calls["unavailable"] == 1)
        let waiting = try #require(try await reconciler.reconcileOnce()["Production"])
        #expect(waiting.pages == 0 && api.requests.count == 1, "not before the time the API named")
        #expect(try await store.claimCheckpoint("appstore.notifications.Production", owner: "probe", until: Date(), now: Date()) == .claimed(position: nil),
                "the lease was given back and the checkpoint did not move")
    }

    static func uuid(of signedPayload: String) -> String? {
        let parts = signedPayload.split(separator: ".")
        guard parts.count == 3, let payload = Base64URL.decode(parts[1]) else { return nil }
        return JSONValue.parse(Array(payload))?.objectValue?["notificationUUID"]?.stringValue
    }
}

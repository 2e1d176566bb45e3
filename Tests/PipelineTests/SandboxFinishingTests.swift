import Crypto
import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import StoreFixtures
import StoreVerification
import Testing
import TestSupport
import WorkerRuntime

/// A production deployment that accepts App Review's sandbox purchases finishes each purchase with the API of the
/// environment it was verified in: the sandbox's for Sandbox, alone and in a batch. Without a sandbox API, every purchase
/// goes to the one configured, as before.
@Suite struct SandboxFinishingTests {
    @Test(arguments: StoreEngine.available) func aSandboxPurchaseIsFinishedWithTheSandboxAPI(_ engine: StoreEngine) async throws {
        let key = try PrivateKey.generateP256()
        func standIn() throws -> AppStoreServerAPIStandIn {
            try AppStoreServerAPIStandIn(publicKey: try key.publicKey(), keyId: "K", issuerId: "I", bundleId: PipelineTests.bundle)
        }
        let (production, sandbox) = (try standIn(), try standIn())
        func client(_ standIn: AppStoreServerAPIStandIn) -> AppStoreServerAPIClient {
            AppStoreServerAPIClient(configuration: .init(baseURL: standIn.baseURL, keyId: "K", issuerId: "I", bundleId: PipelineTests.bundle, privateKey: key))
        }
        let store = try SQLPurchaseStore(url: try await engine.freshURL())
        try await store.migrate()
        let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test")
        let now = Date()
        let stage = FinisherStage(context: StageContext(codec: codec, logger: Logger(stage: "t", minimum: .error), now: { now }), store: store,
                                  appStoreAPI: client(production), sandboxAPI: client(sandbox))
        func granted(_ id: String, _ environment: AppStoreEnvironment, offset: Int64) async throws -> KafkaMessage {
            let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: "u", productId: "coins.100", productType: .consumable,
                                        quantity: 1, purchaseTime: now, environment: environment.rawValue)
            #expect(try await store.recordVerified(record, at: now) == .recorded)
            _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: now)
            let message = try codec.message(ItemGranted(store: .appstore, transactionId: id, userId: "u", productId: "coins.100", productType: "consumable",
                                                        quantity: 1, items: [GrantedItem(kind: .currency, code: "coins", amount: 100)],
                                                        alreadyGranted: false, grantedAt: now), time: now)
            return KafkaMessage(topic: message.topic, partition: 0, offset: offset, key: message.key, value: message.value, headers: message.headers)
        }
        // Alone.
        _ = try await stage.handle(try await granted("9101", .production, offset: 0))
        _ = try await stage.handle(try await granted("9102", .sandbox, offset: 1))
        // In a batch.
        let batch = [try await granted("9103", .sandbox, offset: 2), try await granted("9104", .production, offset: 3)]
        for result in await stage.handle(batch: batch) {
            guard case .success(.publish(let outputs)) = result else { Issue.record("\(result)"); continue }
            #expect(outputs.count == 1, "transaction.finished")
        }
        #expect(production.finished.sorted() == ["9101", "9104"])
        #expect(sandbox.finished.sorted() == ["9102", "9103"])
        let states = try await store.states(of: ["9101", "9102", "9103", "9104"].map { PurchaseKey(store: .appstore, transactionId: $0) })
        #expect(Set(states.values) == [.finished])

        // Consumption requests are answered with the API of the purchase's environment too.
        try await store.recordConsent(userId: "u", consumptionData: true, decidedAt: now.addingTimeInterval(-3600))
        for id in ["9101", "9102"] {
            let requested = ConsumptionRequested(store: .appstore, transactionId: id, ownershipType: "PURCHASED", notificationUUID: UUID().uuidString.lowercased(),
                                                 requestedAt: now.addingTimeInterval(-60), answerBy: now.addingTimeInterval(12 * 3600))
            let message = try codec.message(requested, time: now)
            _ = try await stage.handle(KafkaMessage(topic: message.topic, partition: 0, offset: 4, key: message.key, value: message.value, headers: message.headers))
        }
        #expect(production.consumptions.map(\.transactionId) == ["9101"])
        #expect(sandbox.consumptions.map(\.transactionId) == ["9102"])
    }

    /// Half configured (the verifier accepts sandbox purchases, the finisher has production's API alone): production's API
    /// does not know a sandbox purchase, and the dead letter says which setting is missing.
    @Test func aSandboxPurchaseRefusedByTheOnlyAPINamesTheMissingSetting() async throws {
        let key = try PrivateKey.generateP256()
        let production = try AppStoreServerAPIStandIn(publicKey: try key.publicKey(), keyId: "K", issuerId: "I", bundleId: PipelineTests.bundle)
        production.fail(.init(status: 404))
        let store = try SQLPurchaseStore(url: try await StoreEngine.sqlite.freshURL())
        try await store.migrate()
        let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test")
        let now = Date()
        let stage = FinisherStage(context: StageContext(codec: codec, logger: Logger(stage: "t", minimum: .error), now: { now }), store: store,
                                  appStoreAPI: AppStoreServerAPIClient(configuration: .init(baseURL: production.baseURL, keyId: "K", issuerId: "I",
                                                                                            bundleId: PipelineTests.bundle, privateKey: key)))
        let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "9201"), userId: "u", productId: "coins.100", productType: .consumable,
                                    quantity: 1, purchaseTime: now, environment: AppStoreEnvironment.sandbox.rawValue)
        _ = try await store.recordVerified(record, at: now)
        _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: now)
        let message = try codec.message(ItemGranted(store: .appstore, transactionId: "9201", userId: "u", productId: "coins.100", productType: "consumable",
                                                    quantity: 1, items: [], alreadyGranted: false, grantedAt: now), time: now)
        let result = try await stage.handle(KafkaMessage(topic: message.topic, partition: 0, offset: 0, key: message.key, value: message.value,
                                                         headers: message.headers))
        guard case .deadLetter(let reason, let detail) = result else { Issue.record("\(result)"); return }
        #expect(reason == "storeRefusedFinish")
        #expect(detail.contains("--appstore-sandbox-api-url"), "\(detail)")
    }
}


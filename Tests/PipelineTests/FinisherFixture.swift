import Crypto
import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import StoreFixtures
import StoreVerification
import TestSupport
import WorkerRuntime

/// A finisher stage driven directly on a fresh store, finishing App Store purchases through a stand-in of the App Store
/// Server API (`production`) and, when asked, a second stand-in as the sandbox's API (`sandbox`).
struct FinisherFixture {
    let key: PrivateKey
    let production: AppStoreServerAPIStandIn
    let sandbox: AppStoreServerAPIStandIn?
    let store: SQLPurchaseStore
    let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test")
    let now = Date()
    let stage: FinisherStage

    /// - Parameter failing: the production API's answer to every call, when it is to fail.
    init(_ engine: StoreEngine, withSandbox: Bool = false, failing: AppStoreServerAPIStandIn.Failure? = nil) async throws {
        let key = try PrivateKey.generateP256()
        func standIn() throws -> AppStoreServerAPIStandIn {
            try AppStoreServerAPIStandIn(publicKey: try key.publicKey(), keyId: "K", issuerId: "I", bundleId: PipelineTests.bundle)
        }
        func client(_ standIn: AppStoreServerAPIStandIn) -> AppStoreServerAPIClient {
            AppStoreServerAPIClient(configuration: .init(baseURL: standIn.baseURL, keyId: "K", issuerId: "I", bundleId: PipelineTests.bundleID, privateKey: key))
        }
        self.key = key
        production = try standIn()
        if let failing { production.fail(failing) }
        sandbox = withSandbox ? try standIn() : nil
        store = try SQLPurchaseStore(url: try await engine.freshURL())
        try await store.migrate()
        let now = now
        stage = FinisherStage(context: StageContext(codec: codec, logger: Logger(stage: "t", minimum: .error), now: { now }), store: store,
                              appStoreAPI: client(production), sandboxAPI: sandbox.map(client))
    }

    /// `event` as the finisher's consumer hands it over, at `offset` of partition 0.
    func message<Event: PipelineEvent>(_ event: Event, offset: Int64 = 0) throws -> KafkaMessage {
        let produced = try codec.message(event, time: now)
        return KafkaMessage(topic: produced.topic, partition: 0, offset: offset, key: produced.key, value: produced.value, headers: produced.headers)
    }

    /// A consumable App Store purchase of 100 coins by "u", recorded in `environment` and granted: its `item.granted`.
    func granted(_ id: TransactionID, _ environment: AppStoreEnvironment = .production, offset: Int64 = 0) async throws -> KafkaMessage {
        let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: "u", productId: "coins.100", productType: .consumable,
                                    quantity: 1, purchaseTime: now, environment: environment.rawValue)
        _ = try await store.recordVerified(record, at: now)
        _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: now)
        return try message(ItemGranted(store: .appstore, transactionId: id, userId: "u", productId: "coins.100", productType: "consumable", quantity: 1,
                                       items: [GrantedItem(kind: .currency, code: "coins", amount: 100)], alreadyGranted: false, grantedAt: now),
                           offset: offset)
    }
}

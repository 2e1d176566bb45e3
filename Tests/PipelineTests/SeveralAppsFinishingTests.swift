import Crypto
import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Testing
import TestSupport
import WorkerRuntime

/// A finisher of two App Store apps: the App Store Server API's tokens name one bundle id, so each purchase is finished
/// with its own app's token. Each app's stand-in refuses a token for the other app (401), as Apple's API does.
@Suite struct SeveralAppsFinishingTests {
    static let apps: [(id: AppID, bundle: String)] = [("coins-game", "com.example.coins"), ("puzzle", "com.example.puzzle")]

    @Test(arguments: StoreEngine.available) func eachPurchaseIsFinishedWithItsOwnAppsToken(_ engine: StoreEngine) async throws {
        let key = try PrivateKey.generateP256()
        var standIns: [AppID: AppStoreServerAPIStandIn] = [:]
        var clients: [AppID: AppStoreAPIClients] = [:]
        for app in Self.apps {
            let standIn = try AppStoreServerAPIStandIn(publicKey: try key.publicKey(), keyId: "K", issuerId: "I", bundleId: app.bundle)
            standIns[app.id] = standIn
            clients[app.id] = AppStoreAPIClients(api: AppStoreServerAPIClient(configuration: .init(baseURL: standIn.baseURL, keyId: "K", issuerId: "I",
                                                                                                   bundleId: BundleID(app.bundle), privateKey: key)))
        }
        let store = try SQLPurchaseStore(url: try await engine.freshURL())
        try await store.migrate()
        let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test")
        let now = Date()
        let stage = FinisherStage(context: StageContext(codec: codec, logger: Logger(stage: "t", minimum: .error), now: { now }), store: store,
                                  appStoreAPIs: PerApp(primary: "coins-game", byApp: clients))

        /// A consumable purchase of `app` (nil: recorded before apps were named, the primary app's), granted: its `item.granted`.
        func granted(_ id: TransactionID, app: AppID?, offset: Int64) async throws -> KafkaMessage {
            let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: "u", productId: "pack.small", productType: .consumable,
                                        quantity: 1, purchaseTime: now, app: app)
            _ = try await store.recordVerified(record, at: now)
            _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: now)
            let produced = try codec.message(ItemGranted(store: .appstore, transactionId: id, userId: "u", productId: "pack.small", productType: "consumable",
                                                         quantity: 1, items: [GrantedItem(kind: .currency, code: "coins", amount: 100)], alreadyGranted: false,
                                                         grantedAt: now, app: app), time: now)
            return KafkaMessage(topic: produced.topic, partition: 0, offset: offset, key: produced.key, value: produced.value, headers: produced.headers)
        }

        // Alone.
        let alone: [(TransactionID, AppID?)] = [("9301", "coins-game"), ("9302", "puzzle"), ("9303", nil)]
        for (offset, (id, app)) in alone.enumerated() {
            let result = try await stage.handle(try await granted(id, app: app, offset: Int64(offset)))
            #expect(StageFixtures.published(result, as: TransactionFinished.self, codec: codec).map(\.method) == [.appStoreServerAPI], "\(id): \(result)")
        }
        // In a batch.
        let batch = [try await granted("9304", app: "puzzle", offset: 3), try await granted("9305", app: "coins-game", offset: 4)]
        for result in await stage.handle(batch: batch) {
            guard case .success(let answer) = result else { Issue.record("\(result)"); continue }
            #expect(StageFixtures.published(answer, as: TransactionFinished.self, codec: codec).count == 1, "\(answer)")
        }
        func finished(_ app: AppID) -> Set<String> {
            Set(standIns[app]!.requests.filter { $0.hasPrefix("POST /inApps/v1/transactions/") && $0.hasSuffix("/finish") }
                .map { String($0.split(separator: "/").dropLast().last!) })
        }
        #expect(finished("coins-game") == ["9301", "9303", "9305"], "its own, and the one recorded before apps were named")
        #expect(finished("puzzle") == ["9302", "9304"])

        // A purchase of an app this finisher has no API for is dead-lettered with the reason, never finished with another's token.
        let unknown = try await stage.handle(try await granted("9306", app: "retired", offset: 5))
        guard case .deadLetter(let reason, let detail) = unknown else { Issue.record("\(unknown)"); return }
        #expect(reason == "unknownApp" && detail.contains("'retired'"), "\(detail)")
        #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "9306"))?.state == .granted)
    }
}

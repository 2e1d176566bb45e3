import Crypto
import Foundation
import Metrics
import PurchaseDomain
import PurchaseStore
import StoreFixtures
import StoreVerification
import Testing
import TestSupport
@testable import WorkerApp

/// `iap_store_api_requests_total{store,outcome}`: on `/metrics` from the start for each store a worker is configured to
/// call, its `ok` series at 0, and counted by the clients' calls. No broker is reached.
@Suite struct StoreAPIMetricTests {
    static let name = "iap_store_api_requests_total"

    /// The `outcome`s of `store` the worker reports, with their values.
    static func series(_ metrics: MetricsRegistry, _ store: Store) -> [StoreAPIOutcome: Double] {
        Dictionary(uniqueKeysWithValues: StoreAPIOutcome.allCases.compactMap { outcome in
            metrics.value(name, ["store": store.rawValue, "outcome": outcome.rawValue]).map { (outcome, $0) }
        })
    }

    @Test func theFinisherReportsTheStoresItIsConfiguredToCall() async throws {
        let store = try SQLPurchaseStore(url: try await StoreEngine.sqlite.freshURL())
        let key = FileManager.default.temporaryDirectory.appendingPathComponent("store-api-metric-\(UUID().uuidString).p8")
        defer { try? FileManager.default.removeItem(at: key) }
        try Data(try PrivateKey.generateP256().pemRepresentation().utf8).write(to: key)
        let google = try GooglePlayAPIStandIn(purchases: [:])
        let finisher = try WorkerApp.embedded(command: "iap-finisher", settings: Workers.finisherSettings, variables: [
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "IAP_BUNDLE_ID": "com.example.coins", "IAP_APPSTORE_API_URL": "http://127.0.0.1:1",
            "IAP_APPSTORE_KEY_ID": "K", "IAP_APPSTORE_ISSUER_ID": "I", "IAP_APPSTORE_PRIVATE_KEY_FILE": key.path,
            "IAP_GOOGLEPLAY_SERVICE_ACCOUNT_FILE": try google.writeServiceAccountKeyFile(),
        ], store: store)
        _ = try Workers.finisherStage(finisher)
        let text = await finisher.metrics.render()
        #expect(text.contains("# TYPE \(Self.name) counter\n"))
        #expect(text.contains("\(Self.name){outcome=\"ok\",store=\"appstore\"} 0\n"), "\(text)")
        #expect(Self.series(finisher.metrics, .appstore) == [.ok: 0])
        #expect(Self.series(finisher.metrics, .googleplay) == [.ok: 0])
        #expect(Self.series(finisher.metrics, .appcoins).isEmpty, "the finisher never calls AppCoins")

        let bare = try WorkerApp.embedded(command: "iap-finisher", settings: Workers.finisherSettings,
                                          variables: ["KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"], store: store)
        _ = try Workers.finisherStage(bare)
        #expect(await !bare.metrics.render().contains(Self.name), "no store API configured: none called")
    }

    @Test func theSweeperReportsAppCoinsWhichItAlwaysAsks() async throws {
        let sweeper = try WorkerApp.embedded(command: "iap-sweeper", settings: Workers.sweeperSettings, arguments: ["--kafka", "log_level=0"],
                                             variables: ["KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"], store: try SQLPurchaseStore(url: try await StoreEngine.sqlite.freshURL()))
        _ = try Workers.sweeperServices(sweeper)
        #expect(Self.series(sweeper.metrics, .appcoins) == [.ok: 0])
        #expect(Self.series(sweeper.metrics, .appstore).isEmpty && Self.series(sweeper.metrics, .googleplay).isEmpty)
    }

    /// The observer the workers build counts each call of a real client in its store's series by outcome.
    @Test func callsAreCountedInTheirStoresSeries() async throws {
        let api = try AppCoinsAPIStandIn(purchases: ["paid": .init(packageName: "com.example.coins", sku: "coins.100", orderId: "o-1")])
        let metrics = MetricsRegistry()
        let verifier = AppCoinsVerifier(configuration: .init(baseURL: api.baseURL, observer: StoreAPIMetrics.observer(.appcoins, metrics)))
        _ = await verifier.verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "paid")
        api.fail(429)
        _ = await verifier.verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "paid")
        _ = await verifier.verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "paid")
        #expect(Self.series(metrics, .appcoins) == [.ok: 1, .rateLimited: 2])
        #expect(Self.series(metrics, .googleplay).isEmpty)
    }
}

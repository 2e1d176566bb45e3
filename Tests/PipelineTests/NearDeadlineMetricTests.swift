import Foundation
import PurchaseDomain
import PurchaseStore
import Testing
import TestSupport
import WorkerApp

/// `iap_purchases_near_deadline{store}` as the sweeper reports it: the purchases still open within
/// `--near-deadline-hours` of their store's deadline (Google Play's three days, the App Store's 24 hours). No broker is
/// reached.
@Suite struct NearDeadlineMetricTests {
    @Test func purchasesOpenNearTheirStoresDeadlineAreCounted() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("near-deadline-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLPurchaseStore(url: "sqlite:" + directory.appendingPathComponent("store.sqlite").path)
        _ = try await store.migrate()
        let now = Date()
        func purchase(_ storeName: Store, _ id: TransactionID, hoursAgo: Double, finished: Bool = false, app: AppID? = nil) async throws {
            let record = PurchaseRecord(key: PurchaseKey(store: storeName, transactionId: id), userId: "u", productId: "coins.100", productType: .consumable,
                                        quantity: 1, purchaseTime: now.addingTimeInterval(-hoursAgo * 3600), app: app)
            #expect(try await store.recordVerified(record, at: now) == .recorded)
            guard case .granted = try await store.grant(record.key, items: [.currency("coins", 100)], at: now) else { Issue.record("\(id) not granted"); return }
            if finished { _ = try await store.finish(record.key, at: now) }
        }
        try await purchase(.googleplay, "GPA.near", hoursAgo: 70)           // 2 h before Google refunds it
        try await purchase(.googleplay, "GPA.done", hoursAgo: 70, finished: true)
        try await purchase(.googleplay, "GPA.young", hoursAgo: 20)
        try await purchase(.appstore, "2000000001", hoursAgo: 20)           // 4 h before the App Store's deadline
        try await purchase(.appstore, "2000000002", hoursAgo: 1)
        let env = try WorkerApp.embedded(command: "iap-sweeper", settings: Workers.sweeperSettings, arguments: ["--kafka", "log_level=0"],
                                         variables: ["KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "IAP_NEAR_DEADLINE_HOURS": "6"], store: store)
        _ = try Workers.sweeperServices(env)
        _ = await env.metrics.render()
        #expect(env.metrics.value("iap_purchases_near_deadline", ["store": "googleplay"]) == 1)
        #expect(env.metrics.value("iap_purchases_near_deadline", ["store": "appstore"]) == 1)
        #expect(env.metrics.value("iap_purchases_near_deadline", ["store": "appcoins"]) == 0)

        // With an apps file, by app: what was recorded without one is the first app's; every app is reported, at zero too.
        try await purchase(.appstore, "2000000003", hoursAgo: 20, app: "puzzle")
        let apps = directory.appendingPathComponent("apps.json")
        try Data(#"{"apps": [{"id": "coins-game", "appstore": {"bundleId": "com.example.coins"}}, {"id": "puzzle", "appstore": {"bundleId": "com.example.puzzle"}}]}"#.utf8)
            .write(to: apps)
        let named = try WorkerApp.embedded(command: "iap-sweeper", settings: Workers.sweeperSettings, arguments: ["--kafka", "log_level=0"],
                                           variables: ["KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "IAP_APPS_FILE": apps.path,
                                                       "IAP_SCHEMAS_DIR": TestServices.packageRoot.appendingPathComponent("schemas").path], store: store)
        _ = try Workers.sweeperServices(named)
        _ = await named.metrics.render()
        #expect(named.metrics.value("iap_purchases_near_deadline", ["store": "appstore", "app": "coins-game"]) == 1)
        #expect(named.metrics.value("iap_purchases_near_deadline", ["store": "appstore", "app": "puzzle"]) == 1)
        #expect(named.metrics.value("iap_purchases_near_deadline", ["store": "googleplay", "app": "puzzle"]) == 0)
        #expect(named.metrics.value("iap_purchases_near_deadline", ["store": "googleplay", "app": "coins-game"]) == 1)
    }
}

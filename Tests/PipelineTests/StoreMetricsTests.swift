import Database
import Foundation
import Metrics
import PurchaseDomain
@testable import PurchaseStore
import Synchronization
import Testing
import TestSupport
@testable import WorkerApp

/// `/metrics`' store gauges: open purchases as of each scrape, the states that only grow as last counted.
@Suite struct StoreMetricsTests {
    @Test func closedStatesAreCountedOncePerIntervalOpenOnesAtEachScrape() async throws {
        let store = try SQLPurchaseStore(url: try await StoreEngine.sqlite.freshURL())
        try await store.migrate()
        let clock = Mutex(Date(timeIntervalSince1970: 1_000_000))
        let metrics = MetricsRegistry()
        StoreMetrics.register(store: store, metrics: metrics, stages: ["granter"], totalsInterval: 300, now: { clock.withLock { $0 } })
        var next = 0
        func record(_ state: PurchaseState, _ count: Int) async throws {
            for _ in 0..<count {
                next += 1
                let values: [SQLValue] = [.text("t\(next)"), .text(state.rawValue)]
                _ = try await store.executor.run { connection in
                    try connection.query("""
                        INSERT INTO purchases (store, transaction_id, original_transaction_id, user_id, product_id, quantity, purchase_time, state, product_type)
                        VALUES ('appstore', $1, $1, 'user-1', 'coins.100', 1, 999000000, $2, 'consumable')
                        """, values)
                }
            }
        }
        func scrape(after seconds: TimeInterval) async -> [PurchaseState: Double] {
            clock.withLock { $0 += seconds }
            _ = await metrics.render()
            return Dictionary(uniqueKeysWithValues: PurchaseState.recorded.compactMap { state in
                metrics.value("iap_purchases", ["state": state.rawValue, "store": "appstore"]).map { (state, $0) }
            })
        }

        try await record(.verified, 2)
        try await record(.finished, 3)
        try await record(.unclaimed, 1)
        #expect(await scrape(after: 0) == [.unclaimed: 1, .verified: 2, .granted: 0, .finished: 3, .rejected: 0, .refundDue: 0, .revoked: 0])
        let appStore = ["store": "appstore"]
        #expect(metrics.value("iap_oldest_unfinished_purchase_age_seconds", appStore) == 1_000)
        #expect(metrics.value("iap_unclaimed_charges", appStore) == 1 && metrics.value("iap_oldest_unclaimed_charge_age_seconds", appStore) == 1_000)

        try await record(.granted, 1)
        try await record(.finished, 2)
        try await record(.revoked, 1)
        #expect(await scrape(after: 299) == [.unclaimed: 1, .verified: 2, .granted: 1, .finished: 3, .rejected: 0, .refundDue: 0, .revoked: 0],
                "open purchases as they are, the others as counted 299 s ago")
        #expect(await scrape(after: 1) == [.unclaimed: 1, .verified: 2, .granted: 1, .finished: 5, .rejected: 0, .refundDue: 0, .revoked: 1],
                "counted again once the interval has passed")
        try await record(.rejected, 1)
        #expect(await scrape(after: -3_600) == [.unclaimed: 1, .verified: 2, .granted: 1, .finished: 5, .rejected: 1, .refundDue: 0, .revoked: 1],
                "a clock set back past the last count counts again")
        #expect(metrics.value("iap_store_up") == 1)
    }

    /// Each store has its own deadline, each app its own team: the figures say whose purchases wait.
    @Test func theFiguresAreSplitByStoreAndApp() async throws {
        let store = try SQLPurchaseStore(url: try await StoreEngine.sqlite.freshURL())
        try await store.migrate()
        let clock = Mutex(Date(timeIntervalSince1970: 1_000_000))
        let metrics = MetricsRegistry()
        StoreMetrics.register(store: store, metrics: metrics, stages: [], totalsInterval: 300, now: { clock.withLock { $0 } })
        func record(_ id: String, _ storeName: Store, app: String?, state: PurchaseState, boughtAt seconds: Int64) async throws {
            let values: [SQLValue] = [.text(storeName.rawValue), .text(id), .text(state.rawValue), app.map(SQLValue.text) ?? .null, .integer(seconds * 1_000)]
            _ = try await store.executor.run { connection in
                try connection.query("""
                    INSERT INTO purchases (store, transaction_id, original_transaction_id, user_id, product_id, quantity, purchase_time, state, product_type, app)
                    VALUES ($1, $2, $2, 'user-1', 'coins.100', 1, $5, $3, 'consumable', $4)
                    """, values)
            }
        }
        try await record("a1", .appstore, app: "coins-game", state: .granted, boughtAt: 990_000)
        try await record("a2", .appstore, app: "puzzle", state: .verified, boughtAt: 999_000)
        try await record("g1", .googleplay, app: "coins-game", state: .granted, boughtAt: 800_000)
        try await record("g2", .googleplay, app: "coins-game", state: .finished, boughtAt: 700_000)
        try await record("g3", .googleplay, app: "coins-game", state: .unclaimed, boughtAt: 900_000)
        try await record("o1", .appstore, app: nil, state: .verified, boughtAt: 999_500)
        _ = await metrics.render()

        let coinsOnPlay = ["store": "googleplay", "app": "coins-game"]
        #expect(metrics.value("iap_oldest_unfinished_purchase_age_seconds", coinsOnPlay) == 200_000)
        #expect(metrics.value("iap_oldest_unfinished_purchase_age_seconds", ["store": "appstore", "app": "coins-game"]) == 10_000)
        #expect(metrics.value("iap_oldest_unfinished_purchase_age_seconds", ["store": "appstore", "app": "puzzle"]) == 1_000)
        #expect(metrics.value("iap_oldest_unfinished_purchase_age_seconds", ["store": "appstore"]) == 500, "recorded without an app")
        #expect(metrics.value("iap_oldest_unfinished_purchase_age_seconds", ["store": "appcoins"]) == 0, "every store from the start")
        #expect(metrics.value("iap_purchases", coinsOnPlay.merging(["state": "granted"]) { $1 }) == 1)
        #expect(metrics.value("iap_purchases", coinsOnPlay.merging(["state": "finished"]) { $1 }) == 1)
        #expect(metrics.value("iap_purchases", ["store": "appstore", "app": "puzzle", "state": "verified"]) == 1)
        #expect(metrics.value("iap_purchases", ["store": "appstore", "app": "puzzle", "state": "granted"]) == 0)
        #expect(metrics.value("iap_unclaimed_charges", coinsOnPlay) == 1 && metrics.value("iap_oldest_unclaimed_charge_age_seconds", coinsOnPlay) == 100_000)

        // Once finished, the app stays reported, at zero.
        _ = try await store.executor.run { connection in try connection.query("UPDATE purchases SET state = 'finished' WHERE transaction_id = 'a2'") }
        _ = await metrics.render()
        #expect(metrics.value("iap_purchases", ["store": "appstore", "app": "puzzle", "state": "verified"]) == 0)
        #expect(metrics.value("iap_oldest_unfinished_purchase_age_seconds", ["store": "appstore", "app": "puzzle"]) == 0)
    }
}

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
                metrics.value("iap_purchases", ["state": state.rawValue]).map { (state, $0) }
            })
        }

        try await record(.verified, 2)
        try await record(.finished, 3)
        try await record(.unclaimed, 1)
        #expect(await scrape(after: 0) == [.unclaimed: 1, .verified: 2, .granted: 0, .finished: 3, .rejected: 0, .refundDue: 0, .revoked: 0])
        #expect(metrics.value("iap_oldest_unfinished_purchase_age_seconds") == 1_000)
        #expect(metrics.value("iap_unclaimed_charges") == 1 && metrics.value("iap_oldest_unclaimed_charge_age_seconds") == 1_000)

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
}

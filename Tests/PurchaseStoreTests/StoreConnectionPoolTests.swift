import Database
import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Synchronization
import Testing
import TestSupport

/// A worker's partitions commit side by side on PostgreSQL: a batch holds one of the store's connections, not the store.
@Suite struct StoreConnectionPoolTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_500_000)

    static func purchase(_ id: String, user: String) -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: "coins.100", productType: .consumable,
                       quantity: 1, purchaseTime: t0)
    }

    /// Batch A stays open until batch B, begun after it on the same store, has committed; then A commits. With one
    /// connection B would wait for A's COMMIT, and A gives up waiting (after a minute: ten seconds were not enough under
    /// the whole suite's load on two cores).
    @Test(arguments: StoreEngine.available.filter { $0 == .postgres })
    func aSecondBatchCommitsWhileTheFirstIsOpen(_ engine: StoreEngine) async throws {
        let store = try SQLPurchaseStore(url: try await engine.freshURL(), connections: 2)
        try await store.migrate()
        let first = Self.purchase("pool-a", user: "user-a"), second = Self.purchase("pool-b", user: "user-b")
        let secondCommitted = Atomic(false)
        let firstOpen = AsyncStream<Void>.makeStream()
        async let firstBatch: Bool = store.batch {
            _ = try await store.recordVerified(first, at: Self.t0)
            firstOpen.continuation.yield()
            let deadline = ContinuousClock.now + .seconds(60)
            while !secondCommitted.load(ordering: .acquiring) {
                guard ContinuousClock.now < deadline else { return false }
                try await Task.sleep(for: .milliseconds(5))
            }
            return true
        }
        var opened = firstOpen.stream.makeAsyncIterator()
        _ = await opened.next()
        let secondStarted = ContinuousClock.now
        try await store.batch { _ = try await store.recordVerified(second, at: Self.t0) }
        secondCommitted.store(true, ordering: .releasing)
        let secondTook = ContinuousClock.now - secondStarted
        #expect(try await firstBatch, "the second batch committed while the first held its transaction open (it took \(secondTook))")
        #expect(try await store.states(of: [first.key, second.key]) == [first.key: .verified, second.key: .verified])
    }

    /// SQLite has one writer at a time: one connection whatever is asked for.
    @Test func sqliteKeepsOneConnection() async throws {
        let store = try SQLPurchaseStore(url: try await StoreEngine.sqlite.freshURL(), connections: 4)
        #expect(store.executors.count == 1)
    }
}

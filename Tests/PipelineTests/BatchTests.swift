import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StoreFixtures
import Testing
import TestSupport

extension PipelineTests {
    /// Verified purchases waiting together are granted in one batch; one of them not in the store yet makes its batch
    /// fail and roll back whole. The messages before it are then granted alone, it is retried in place until it can be
    /// granted, and the rest are batched again: each purchase granted once (a repeat inside the batch answers
    /// "already granted"), finished once, balances exact.
    @Test(arguments: StoreEngine.available)
    func aBatchThatFailsIsRolledBackAndEveryPurchaseIsStillGrantedOnce(_ engine: StoreEngine) async throws {
        let servers = try TestServices.requireBrokers()
        let pipeline = try await Self.start(servers: servers, pki: try TestPKI.make(), storeURL: try await engine.freshURL())
        let now = Date()
        let ids: [TransactionID] = (0..<12).map { "\(8_000_000 + $0)" }
        let missing = ids[5]
        func record(_ id: TransactionID) -> PurchaseRecord {
            PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: "user-b", productId: "coins.100", productType: .consumable,
                           quantity: 1, purchaseTime: now)
        }
        for id in ids where id != missing { #expect(try await pipeline.store.recordVerified(record(id), at: now) == .recorded) }
        // The granter's input as the verifier writes it, all at once so that they wait together; #2 repeated at the end.
        let verified = try (ids + [ids[2]]).map { id in
            try pipeline.codec.message(PurchaseVerifiedEvent(store: .appstore, transactionId: id, productId: "coins.100", productType: "consumable",
                                                             quantity: 1, userId: "user-b", purchaseDate: now, source: .client, verifiedAt: now), time: now)
        }
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        for result in await producer.send(contentsOf: verified) { _ = try result.get() }

        let granter = pipeline.runners[1]
        try await waitUntil("the purchase missing from the store is retried") { granter.counters.withLock { ($0["retries"] ?? 0) >= 1 } }
        #expect(try await pipeline.store.recordVerified(record(missing), at: now) == .recorded)
        try await waitUntil("every purchase finished", timeout: .seconds(120)) {
            try await pipeline.store.statistics().purchasesByState[.finished] == ids.count
        }
        try await waitUntil("the repeat is answered") { granter.counters.withLock { $0["handled"] ?? 0 } == verified.count }
        let counters = granter.counters.withLock { $0 }
        try await pipeline.stop()

        #expect((counters["batches"] ?? 0) >= 1, "messages waiting together are batched: \(counters)")
        #expect((counters["batchesCut"] ?? 0) >= 1, "the batch holding the missing purchase was rolled back: \(counters)")
        let audit = try await pipeline.store.audit()
        for id in ids {
            #expect(audit.purchases[PurchaseKey(store: .appstore, transactionId: id)]?.grantEntries == 1, "\(id) granted once")
        }
        #expect(audit.balanceMismatches.isEmpty && audit.finishedWithoutGrant.isEmpty)
        #expect(try await pipeline.store.balances(of: "user-b") == ["coins": 1_200])
        #expect(pipeline.appStore.finished.sorted() == ids, "Finish Transaction once per purchase")
    }
}

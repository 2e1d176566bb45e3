import Database
import Foundation
import PurchaseDomain
import PurchaseStore
import Testing
import TestSupport

/// Consent, consumption reports and consumption requests as the repository keeps them, in memory and on both engines.
@Suite struct ConsumptionStoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)

    @Test(arguments: RepositoryKind.available) func theLatestConsentStandsAndATieIsARefusal(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        #expect(try await store.consumptionDataConsent(of: "u") == nil, "never asked")
        #expect(try await store.recordConsent(userId: "u", consumptionData: true, decidedAt: Self.t0, now: Self.t0))
        #expect(try await !store.recordConsent(userId: "u", consumptionData: false, decidedAt: Self.t0.addingTimeInterval(-60), now: Self.t0),
                "an earlier decision arriving late changes nothing")
        #expect(try await store.consumptionDataConsent(of: "u") == true)
        #expect(try await store.recordConsent(userId: "u", consumptionData: false, decidedAt: Self.t0, now: Self.t0), "same time: the refusal stands")
        #expect(try await !store.recordConsent(userId: "u", consumptionData: true, decidedAt: Self.t0, now: Self.t0), "and stays")
        #expect(try await store.consumptionDataConsent(of: "u") == false)
        // A decision stamped in the future counts as made now, so it cannot shut out the decisions that follow.
        #expect(try await store.recordConsent(userId: "u", consumptionData: true, decidedAt: Self.t0.addingTimeInterval(86_400), now: Self.t0.addingTimeInterval(1)))
        #expect(try await store.recordConsent(userId: "u", consumptionData: false, decidedAt: Self.t0.addingTimeInterval(2), now: Self.t0.addingTimeInterval(2)))
        #expect(try await store.consumptionDataConsent(of: "u") == false)
    }

    @Test(arguments: RepositoryKind.available) func aConsumptionRequestIsClaimedOnceAndAStaleClaimIsTakenOver(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let key = PurchaseKey(store: .appstore, transactionId: "c-1")
        #expect(try await store.claimConsumptionRequest(key, notificationUUID: "n-1", at: Self.t0, staleAfter: 300) == .claimed)
        #expect(try await store.claimConsumptionRequest(key, notificationUUID: "n-1", at: Self.t0.addingTimeInterval(10), staleAfter: 300) == .inProgress)
        #expect(try await store.claimConsumptionRequest(key, notificationUUID: "n-1", at: Self.t0.addingTimeInterval(301), staleAfter: 300) == .claimed,
                "the first attempt died after claiming")
        try await store.releaseConsumptionClaim(notificationUUID: "n-1")
        #expect(try await store.claimConsumptionRequest(key, notificationUUID: "n-1", at: Self.t0.addingTimeInterval(302), staleAfter: 300) == .claimed,
                "a released claim is taken at once")
        try await store.recordConsumptionAnswer(notificationUUID: "n-1", outcome: "sent", detail: "DELIVERED", at: Self.t0.addingTimeInterval(303))
        let answered = ConsumptionAnswer(outcome: "sent", detail: "DELIVERED", answeredAt: Self.t0.addingTimeInterval(303))
        #expect(try await store.claimConsumptionRequest(key, notificationUUID: "n-1", at: Self.t0.addingTimeInterval(9_999), staleAfter: 300) == .answered(answered))
        #expect(try await store.consumptionAnswer(notificationUUID: "n-1") == answered)
        #expect(try await store.claimConsumptionRequest(key, notificationUUID: "n-2", at: Self.t0, staleAfter: 300) == .claimed, "another request of the same purchase")
    }

    /// A consumable known consumed — the app reported it (before its grant, or after it while the finisher had not finished
    /// it yet), or the store did at verification — is never flagged at its deadline; the others are, once.
    @Test(arguments: RepositoryKind.available) func theSweepNeverFlagsAPurchaseKnownConsumed(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        func purchase(_ id: TransactionID, granted: Bool, appReported: Bool = false, storeReported: Bool = false) async throws {
            let record = PurchaseRecord(key: PurchaseKey(store: .appcoins, transactionId: id), userId: "u", productId: "coins.100", productType: .consumable,
                                        quantity: 1, purchaseTime: Self.t0, packageName: "com.example.coins", purchaseToken: "token-\(id)",
                                        storeConsumed: storeReported)
            #expect(try await store.recordVerified(record, at: Self.t0) == .recorded)
            if appReported { _ = try await store.recordConsumed(record.key, at: Self.t0) }
            if granted { _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: Self.t0) }
        }
        try await purchase("reported-before-grant", granted: false, appReported: true)
        try await purchase("reported-after-grant", granted: true, appReported: true)
        try await purchase("store-reported", granted: false, storeReported: true)
        try await purchase("unconsumed-verified", granted: false)
        try await purchase("unconsumed-granted", granted: true)
        let later = Self.t0.addingTimeInterval(48 * 3600)
        #expect(Set(try await store.sweepDue(store: .appcoins, deadline: 86_400, now: later, limit: 2).map(\.record.key.transactionId))
                == ["unconsumed-verified", "unconsumed-granted"], "a page of two: the consumed ones do not take its places")
        #expect(try await store.sweepDue(store: .appcoins, deadline: 86_400, now: later).isEmpty, "once")
        #expect(try await store.dueGrantedWithToken(store: .appcoins, deadline: 86_400, now: later).isEmpty, "nothing to ask the store about")
    }

    @Test(arguments: RepositoryKind.available) func consumptionFactsTellDeliveryFromConsumption(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "f-1"), userId: "u", productId: "coins.100", productType: .consumable,
                                    quantity: 1, purchaseTime: Self.t0)
        #expect(try await store.consumptionFacts(record.key) == nil)
        _ = try await store.recordVerified(record, at: Self.t0)
        #expect(try await store.consumptionFacts(record.key)?.delivered == false)
        _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: Self.t0)
        _ = try await store.finish(record.key, at: Self.t0)
        #expect(try await store.consumptionFacts(record.key) == ConsumptionFacts(userId: "u", productType: .consumable, state: .finished, delivered: true, consumed: false),
                "finished with the store is not consumed")
        _ = try await store.recordConsumed(record.key, at: Self.t0)
        #expect(try await store.consumptionFacts(record.key)?.consumed == true)
        _ = try await store.revoke(record.key, at: Self.t0)
        #expect(try await store.consumptionFacts(record.key)?.delivered == true, "refunded since, but it was delivered")
    }

    /// A report of a purchase that a verifier's batch read ahead as not recorded, and records, waits for that batch (its lock
    /// on the purchase) and then lands on the record: not kept apart where the record, inserted meanwhile, would never
    /// read it. The purchase verified in a batch takes a report kept before, in the set insert as alone. PostgreSQL: on
    /// SQLite the report's writer waits for the batch's hold on the database anyway.
    @Test(.enabled(if: StoreEngine.postgres.enabled)) func aReportRacingItsPurchasesRecordLandsOnTheRecord() async throws {
        let url = try await StoreEngine.postgres.freshURL()
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        // Another worker: the finisher. Its wait unbounded: how long the test takes to see it waiting is not what is tested.
        let reporter = try SQLPurchaseStore(url: url, lockTimeout: .zero)
        let observer = try PostgresConnection(url: url)
        func record(_ id: TransactionID) -> PurchaseRecord {
            PurchaseRecord(key: PurchaseKey(store: .appcoins, transactionId: id), userId: "u", productId: "coins.100", productType: .consumable,
                           quantity: 1, purchaseTime: Self.t0)
        }
        let (racing, reportedFirst, other) = (record("race-1"), record("early-1"), record("other-1"))
        #expect(try await reporter.recordConsumed(reportedFirst.key, at: Self.t0) == .beforeItsPurchase)
        let report = try await store.batch {
            try await store.readAhead([racing.key, reportedFirst.key, other.key])
            let report = Task { try await reporter.recordConsumed(racing.key, at: Self.t0) }
            try await waitUntil("the report waits for the batch") {
                try observer.waitingAdvisoryLocks() == 1
            }
            for purchase in [racing, reportedFirst, other] { #expect(try await store.recordVerified(purchase, at: Self.t0) == .recorded) }
            return report
        }
        #expect(try await report.value == .withItsPurchase)
        #expect(try await store.appReportedConsumption(racing.key) != nil, "the report landed on the record")
        #expect(try await store.appReportedConsumption(reportedFirst.key) != nil, "the record took the report kept before it")
        #expect(try await store.appReportedConsumption(other.key) == nil)
    }

    /// A report kept for a purchase not recorded is counted as waiting until the record takes it, then pruned (once).
    @Test(arguments: RepositoryKind.available) func aKeptReportWaitsUntilItsRecordTakesItThenIsPruned(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let record = PurchaseRecord(key: PurchaseKey(store: .appcoins, transactionId: "kept-1"), userId: "u", productId: "coins.100",
                                    productType: .consumable, quantity: 1, purchaseTime: Self.t0)
        #expect(try await store.recordConsumed(record.key, at: Self.t0) == .beforeItsPurchase)
        #expect(try await store.consumptionReportsWaiting() == 1)
        #expect(try await store.pruneTakenConsumptionReports() == 0, "not taken yet")
        _ = try await store.recordVerified(record, at: Self.t0)
        #expect(try await store.consumptionReportsWaiting() == 0)
        #expect(try await store.pruneTakenConsumptionReports() == 1)
        #expect(try await store.pruneTakenConsumptionReports() == 0)
        #expect(try await store.appReportedConsumption(record.key) != nil, "the record keeps what it took")
    }
}

import Database
import Foundation
import PurchaseDomain
import PurchaseStore
import Testing
import TestSupport

/// The lookups a batch makes in one statement (per 256 keys on SQLite), on both engines: each key answered, none invented.
@Suite struct BatchLookupStoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)

    func freshStore(_ engine: StoreEngine) async throws -> SQLPurchaseStore { try await engine.freshStore() }

    /// 300 keys: more than one group, the last one padded. Every third is recorded, every sixth of those granted too.
    @Test(arguments: RepositoryKind.available) func statesOfManyKeysAnswerEachRecordedKeyAndNoOther(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let keys = (0..<300).map { PurchaseKey(store: .appstore, transactionId: "7\($0)") }
        var expected: [PurchaseKey: PurchaseState] = [:]
        for (index, key) in keys.enumerated() where index % 3 == 0 {
            let record = PurchaseRecord(key: key, userId: "user-\(index % 7)", productId: "coins.100", productType: .consumable, quantity: 1, purchaseTime: Self.t0)
            #expect(try await store.recordVerified(record, at: Self.t0) == .recorded)
            expected[key] = .verified
            if index % 6 == 0 {
                _ = try await store.grant(key, items: [.currency("coins", 100)], at: Self.t0)
                expected[key] = .granted
            }
        }
        // An AppCoins purchase with the same transaction id is another purchase.
        #expect(try await store.states(of: keys + [PurchaseKey(store: .appcoins, transactionId: "70")]) == expected)
        #expect(try await store.states(of: Array(keys.prefix(5))) == expected.filter { keys.prefix(5).contains($0.key) })
        #expect(try await store.states(of: []) == [:])
    }

    /// Keys travel to PostgreSQL inside array literals: quotes, backslashes, commas, braces and the word NULL are text like any other.
    @Test(arguments: StoreEngine.available) func keysWithArraySyntaxInThemAreLookedUpAsTheyAre(_ engine: StoreEngine) async throws {
        let store = try await freshStore(engine)
        let ids: [TransactionID] = ["a\"b", "c\\d", "e,f", "{g}", "NULL", " h ", "ü€"]
        let keys = ids.map { PurchaseKey(store: .appcoins, transactionId: $0) }
        for key in keys.prefix(4) {
            let record = PurchaseRecord(key: key, userId: "user-1", productId: "coins.100", productType: .consumable, quantity: 1, purchaseTime: Self.t0)
            #expect(try await store.recordVerified(record, at: Self.t0) == .recorded)
        }
        #expect(try await store.states(of: keys + [PurchaseKey(store: .appcoins, transactionId: "a")]) == Dictionary(uniqueKeysWithValues: keys.prefix(4).map { ($0, .verified) }))
    }

    func purchase(_ id: TransactionID) -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: "user-1", productId: "coins.100", productType: .consumable,
                       quantity: 1, purchaseTime: Self.t0)
    }

    /// What a batch reads ahead answers its first decision on each recorded purchase; a refund that came first and a
    /// purchase never seen are read when decided; later decisions and reads see what the earlier ones wrote, and a call
    /// that writes otherwise drops it all.
    @Test(arguments: StoreEngine.available) func aBatchReadAheadDecidesAsTheDatabaseWould(_ engine: StoreEngine) async throws {
        let store = try await freshStore(engine)
        let (verified, refunded, unseen, rejected) = (purchase("8001"), purchase("8002"), purchase("8003"), purchase("8004"))
        #expect(try await store.recordVerified(verified, at: Self.t0) == .recorded)
        #expect(try await store.revoke(refunded.key, at: Self.t0) == .recordedBeforePurchase)
        try await store.batch {
            try await store.readAhead([verified.key, refunded.key, unseen.key, rejected.key, verified.key])
            #expect(try await store.purchase(verified.key)?.state == .verified)
            #expect(try await store.purchase(unseen.key) == nil)
            guard case .granted(_, let balances, _, _) = try await store.grant(verified.key, items: [.currency("coins", 100)], at: Self.t0) else {
                Issue.record("not granted")
                return
            }
            #expect(balances == ["coins": 100])
            #expect(try await store.purchase(verified.key)?.state == .granted, "read again after the decision")
            #expect(try await store.grant(verified.key, items: [.currency("coins", 100)], at: Self.t0)
                == .alreadyGranted(items: [.currency("coins", 100)], balances: ["coins": 100]))
            #expect(try await store.recordVerified(refunded, at: Self.t0) == .revokedEarlier, "its refund is read when decided")
            #expect(try await store.recordVerified(unseen, at: Self.t0) == .recorded)
            #expect(try await store.recordVerified(unseen, at: Self.t0) == .existing(state: .verified, userId: "user-1"))
            // Read ahead as unseen, then recorded by a call that does not use the read-ahead: the decision must not trust it.
            #expect(try await store.recordRejected(rejected, reason: "forged", at: Self.t0) == .recorded)
            #expect(try await store.recordVerified(rejected, at: Self.t0) == .existing(state: .rejected, userId: "user-1"))
        }
        #expect(try await store.states(of: [verified.key, refunded.key, unseen.key, rejected.key])
            == [verified.key: .granted, refunded.key: .revoked, unseen.key: .verified, rejected.key: .rejected])
        #expect(try await store.balances(of: "user-1") == ["coins": 100])
    }

    /// A purchase the batch read ahead as not recorded stays so for the batch: another worker that records it, or its
    /// refund, meanwhile waits for the batch and then sees what it did (no refund lands unseen between the batch's read
    /// and its record). PostgreSQL only: on SQLite the other writer waits for the batch's hold on the database anyway.
    @Test(.enabled(if: StoreEngine.postgres.enabled)) func anotherWorkerWaitsForABatchThatReadAPurchaseAheadAsNotRecorded() async throws {
        let url = try await StoreEngine.postgres.freshURL()
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        // One store per other worker: a store runs its calls one at a time. Their waits unbounded: how long the test takes
        // to see them waiting is not what is tested (StoreLockWaitTests is about the bound).
        let (recorder, refunder) = (try SQLPurchaseStore(url: url, lockTimeout: .zero), try SQLPurchaseStore(url: url, lockTimeout: .zero))
        let observer = try PostgresConnection(url: url)
        let (mine, refunded) = (purchase("9001"), purchase("9002"))
        let elsewhere = PurchaseRecord(key: mine.key, userId: "user-2", productId: "coins.100", productType: .consumable, quantity: 1, purchaseTime: Self.t0)
        let (recordedElsewhere, refundedElsewhere) = try await store.batch {
            try await store.readAhead([mine.key, refunded.key])
            let recording = Task { try await recorder.recordVerified(elsewhere, at: Self.t0) }
            let refunding = Task { try await refunder.revoke(refunded.key, at: Self.t0) }
            try await waitUntil("both other workers wait for the batch") {
                try observer.waitingAdvisoryLocks() == 2
            }
            #expect(try await store.recordVerified(mine, at: Self.t0) == .recorded)
            #expect(try await store.recordVerified(refunded, at: Self.t0) == .recorded)
            return (recording, refunding)
        }
        #expect(try await recordedElsewhere.value == .existing(state: .verified, userId: "user-1"))
        #expect(try await refundedElsewhere.value == .revoked(shortfall: [:]))
        #expect(try await store.states(of: [mine.key, refunded.key]) == [mine.key: .verified, refunded.key: .revoked])
    }

    /// A batch whose connection is lost under a call made in the batch's own task (a decision on a purchase it did not
    /// read ahead, which reads it) fails whole, as under a call made on the connection's queue: nothing of it is
    /// committed, and the store's next call opens a new connection.
    @Test(.enabled(if: StoreEngine.postgres.enabled)) func aBatchThatLosesItsConnectionFailsWholeAndTheStoreReconnects() async throws {
        let url = try await StoreEngine.postgres.freshURL()
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        let observer = try PostgresConnection(url: url)
        let (readAhead, notReadAhead) = (purchase("7101"), purchase("7102"))
        await #expect(throws: DatabaseError.self) {
            try await store.batch {
                try await store.readAhead([readAhead.key])
                #expect(try await store.recordVerified(readAhead, at: Self.t0) == .recorded)
                try observer.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
                _ = try await store.recordVerified(notReadAhead, at: Self.t0)
            }
        }
        #expect(try await store.states(of: [readAhead.key, notReadAhead.key]) == [:], "nothing of the batch was committed")
        #expect(try await store.recordVerified(notReadAhead, at: Self.t0) == .recorded)
    }

    /// Refunds racing their purchases' records from other workers are never lost: each purchase ends revoked, whichever
    /// came first (the record in batches, the refund alone, as the verifier and the granter do). PostgreSQL only: SQLite
    /// runs one writer at a time. A lock waited for past the store's bound fails as transient, and is tried again, as a
    /// stage tries it.
    @Test(.enabled(if: StoreEngine.postgres.enabled)) func refundsRacingTheirRecordsFromAnotherWorkerAreNeverLost() async throws {
        let url = try await StoreEngine.postgres.freshURL()
        let (recorder, refunder) = (try SQLPurchaseStore(url: url), try SQLPurchaseStore(url: url))
        try await recorder.migrate()
        let purchases = (0..<400).map { purchase("race-\($0)") }
        func again(_ store: SQLPurchaseStore, _ body: () async throws -> Void) async throws {
            while true {
                do { return try await body() } catch where store.isTransient(error) { continue }
            }
        }
        async let recorded: Void = {
            for batch in stride(from: 0, to: purchases.count, by: 20).map({ Array(purchases[$0..<min(purchases.count, $0 + 20)]) }) {
                try await again(recorder) {
                    try await recorder.batch {
                        try await recorder.readAhead(batch.map(\.key))
                        for purchase in batch { _ = try await recorder.recordVerified(purchase, at: Self.t0) }
                    }
                }
            }
        }()
        async let refunded: Void = {
            for purchase in purchases { try await again(refunder) { _ = try await refunder.revoke(purchase.key, at: Self.t0) } }
        }()
        _ = try await (recorded, refunded)
        let states = try await recorder.states(of: purchases.map(\.key))
        #expect(states.count == purchases.count)
        #expect(states.values.allSatisfy { $0 == .revoked }, "\(states.filter { $0.value != .revoked }.count) purchases lost their refund")
    }
}

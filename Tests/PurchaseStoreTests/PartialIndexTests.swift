import PurchaseDomain
import Database
import Foundation
@testable import PurchaseStore
import Testing
import TestSupport

/// The sweeper's queries (migrations 7, 9) and a user's pending purchases (migrations 8, 9) are answered from partial indexes on
/// both engines — SQLite uses a partial index only when a query repeats its condition word for word — and those indexes
/// hold only what their queries look for.
@Suite struct PartialIndexTests {
    /// 5,000 purchases of 500 users (`user-(n % 500)`): t0–t4 granted, t5 flagged with its notice unsent, the rest finished.
    func populatedStore(_ engine: StoreEngine) async throws -> SQLPurchaseStore {
        let store = try await engine.freshStore()
        try await store.executor.run { connection in
            for n in 0..<5_000 {
                let state = n < 5 ? "granted" : n == 5 ? "refund_due" : "finished"
                try connection.query("""
                    INSERT INTO purchases (store, transaction_id, original_transaction_id, user_id, product_id, quantity, purchase_time, state,
                                           product_type, purchase_token)
                    VALUES ('appstore', $1, $1, $2, 'coins.100', 1, $3, $4, 'consumable', 'token')
                    """, [.text("t\(n)"), .text("user-\(n % 500)"), .integer(Int64(n)), .text(state)])
            }
            try connection.executeScript(engine == .postgres ? "ANALYZE purchases" : "ANALYZE")
        }
        return store
    }

    /// One more App Store purchase, bought at 9,000 ms.
    func addPurchase(_ store: SQLPurchaseStore, _ id: TransactionID, original: TransactionID, user: UserID, product: ProductID, state: String, type: String) async throws {
        _ = try await store.executor.run { connection in
            try connection.query("""
                INSERT INTO purchases (store, transaction_id, original_transaction_id, user_id, product_id, quantity, purchase_time, state, product_type)
                VALUES ('appstore', $1, $2, $3, $4, 1, 9000, $5, $6)
                """, [.text(id), .text(original), .text(user), .text(product), .text(state), .text(type)])
        }
    }

    /// The plan of `sql` with its parameters, as lines of text.
    func plan(_ store: SQLPurchaseStore, _ engine: StoreEngine, _ sql: String, _ parameters: [SQLValue]) async throws -> String {
        try await store.executor.run { connection in
            let rows = try connection.query((engine == .postgres ? "EXPLAIN " : "EXPLAIN QUERY PLAN ") + sql, parameters)
            return rows.map { row in row.compactMap(\.string).joined(separator: " ") }.joined(separator: "\n")
        }
    }

    @Test(arguments: StoreEngine.available) func theSweepersQueriesUseThePartialIndexes(_ engine: StoreEngine) async throws {
        let store = try await populatedStore(engine)
        let due: [SQLValue] = [.text("appstore"), .integer(1_000_000), .integer(500)]
        let open = try await plan(store, engine, SQLPurchaseStore.openPurchasesDueQuery, due)
        #expect(open.contains("purchases_open_by_time"), "\(open)")
        let leaving = try await plan(store, engine, SQLPurchaseStore.openPurchasesDueLeavingRecheckableQuery, due)
        #expect(leaving.contains("purchases_open_by_time"), "\(leaving)")
        let withToken = try await plan(store, engine, SQLPurchaseStore.grantedWithTokenDueQuery, due + [.integer(2), .text("t2")])
        #expect(withToken.contains("purchases_open_by_time"), "\(withToken)")
        let notices = try await plan(store, engine, SQLPurchaseStore.unsentRefundNoticesQuery, [.text("appstore"), .integer(500)])
        #expect(notices.contains("purchases_refund_outbox"), "\(notices)")
        let unclaimed = try await plan(store, engine, try #require(SQLPurchaseStore.unclaimedDueQuery), due)
        #expect(unclaimed.contains("purchases_unclaimed"), "\(unclaimed)")
        // Every due purchase, for a store asked before flagging: not a scan of every purchase.
        let toAsk = try await plan(store, engine, SQLPurchaseStore.dueToAskQuery, due + [.integer(2), .text("t2")])
        #expect(!toAsk.contains("SCAN purchases") && !toAsk.contains("Seq Scan on purchases"), "\(toAsk)")
        // Subscriptions by expiry (migration 20).
        let lapsed = try await plan(store, engine, SQLPurchaseStore.lapsedSubscriptionsQuery, [.text("appstore"), .integer(0), .integer(1_000_000), .integer(500)])
        #expect(lapsed.contains("purchases_subscription_expiry"), "\(lapsed)")

        // And they find what they did before.
        let withTokenDue = try await store.dueGrantedWithToken(store: .appstore, deadline: 0, now: Date(timeIntervalSince1970: 1_000), limit: 3)
        #expect(withTokenDue.map(\.key.transactionId) == ["t0", "t1", "t2"])
        #expect(try await store.dueGrantedWithToken(store: .appstore, deadline: 0, now: Date(timeIntervalSince1970: 1_000), after: withTokenDue.last)
            .map(\.key.transactionId) == ["t3", "t4"], "the page after")
        #expect(try await store.unsentRefundNotices(store: .appstore, deadline: 0).map(\.record.key.transactionId) == ["t5"])
    }

    @Test(arguments: StoreEngine.available) func aUsersPendingPurchasesAreFoundByTheUser(_ engine: StoreEngine) async throws {
        let store = try await populatedStore(engine)
        let plan = try await plan(store, engine, SQLPurchaseStore.pendingOfUserQuery, [.text("user-0")])
        #expect(plan.contains("purchases_granted_by_user"), "\(plan)")
        #expect(try await store.holdings(of: "user-0").pending.map(\.transactionId) == ["t0"])
    }

    /// Migration 9: a grant changes no indexed column, so PostgreSQL writes the new version beside the old one without an
    /// entry in any index (a heap-only update). Before it, `state` in the partial indexes' conditions made every grant
    /// add an entry to each of the four indexes.
    @Test(TestServices.postgres) func aGrantIsAHeapOnlyUpdate() async throws {
        let store = try await populatedStore(.postgres)
        let heapOnly = try await store.executor.run { connection in
            try connection.query("""
                INSERT INTO purchases (store, transaction_id, original_transaction_id, user_id, product_id, quantity, purchase_time, state, product_type)
                VALUES ('appstore', 'v1', 'v1', 'user-1', 'coins.100', 1, 9000, 'verified', 'consumable')
                """)
            try connection.query("BEGIN")
            defer { _ = try? connection.query("ROLLBACK") }
            try connection.query("UPDATE purchases SET state = 'granted', granted_at = 9001 WHERE store = 'appstore' AND transaction_id = 'v1'")
            return try connection.query("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'purchases'")
                .first.map { [$0[0].int64, $0[1].int64] }
        }
        #expect(heapOnly == [1, 1])
        // The granted purchase is found where it was before.
        #expect(try await store.holdings(of: "user-0").pending.map(\.transactionId) == ["t0"])
    }

    /// Renewals are found by their original transaction id, and the original by its key; a purchase that is its own
    /// original has no entry by original on PostgreSQL (migration 9).
    @Test(arguments: StoreEngine.available) func purchasesAreFoundByTheirOriginal(_ engine: StoreEngine) async throws {
        let store = try await populatedStore(engine)
        try await addPurchase(store, "r1", original: "t7", user: "user-7", product: "pass.monthly", state: "granted", type: "autoRenewable")
        let plan = try await plan(store, engine, SQLPurchaseStore.ownerQuery, [.text("appstore"), .text("t7")])
        #expect(plan.contains("purchases_by_original") && plan.contains(engine == .postgres ? "purchases_pkey" : "sqlite_autoindex_purchases"), "\(plan)")
        #expect(try await store.owner(store: .appstore, originalTransactionId: "t7") == "user-7")
        if engine == .postgres {
            // One renewal among 5,001 purchases: the metapage and one leaf (an entry for each purchase took about 20 pages).
            let pages = try await store.executor.run { connection in
                try connection.query("SELECT pg_relation_size('purchases_by_original') / current_setting('block_size')::bigint").first?[0].int64
            }
            #expect(pages == 2)
        }
    }

    /// `/metrics` reads these at every scrape (migration 12 for the unknown type): a count of every purchase did.
    @Test(arguments: StoreEngine.available) func theScrapesCountsUseThePartialIndexes(_ engine: StoreEngine) async throws {
        let store = try await populatedStore(engine)
        try await addPurchase(store, "v1", original: "v1", user: "user-1", product: "coins.legacy", state: "verified", type: "unknown")
        let openPlan = try await plan(store, engine, SQLPurchaseStore.openPurchasesQuery, [])
        #expect(openPlan.contains("purchases_open_by_time") || openPlan.contains("purchases_granted_by_user"), "\(openPlan)")
        let unknown = try await plan(store, engine, SQLPurchaseStore.unknownProductTypeQuery, [])
        #expect(unknown.contains("purchases_of_unknown_type"), "\(unknown)")
        let unclaimed = try await plan(store, engine, SQLPurchaseStore.unclaimedChargesQuery, [])
        #expect(unclaimed.contains("purchases_unclaimed"), "\(unclaimed)")

        // And they count what a count of every purchase does.
        let open = try await store.openStatistics()
        #expect(open.openPurchasesByState == [.granted: 5, .verified: 1] && open.oldestUnfinishedPurchase == Date(timeIntervalSince1970: 0))
        #expect(open.unknownProductType == 1 && open.unclaimedCharges == 0)
        let all = try await store.statistics()
        #expect(all.purchasesByState == [.granted: 5, .verified: 1, .refundDue: 1, .finished: 4_994])
        #expect(all.oldestUnfinishedPurchase == open.oldestUnfinishedPurchase && all.unknownProductType == open.unknownProductType)
    }

    @Test(TestServices.postgres) func theOpenPurchasesIndexHoldsOnlyOpenPurchases() async throws {
        let store = try await populatedStore(.postgres)
        // Five open purchases of 5,000: the metapage and one leaf. Indexed on (state, purchase_time) as before, every
        // purchase had an entry (about 16 pages here).
        let pages = try await store.executor.run { connection in
            try connection.query("SELECT pg_relation_size('purchases_open_by_time') / current_setting('block_size')::bigint").first?[0].int64
        }
        #expect(pages == 2)
    }

    /// The generated columns the PostgreSQL indexes select by (`is_open`, `refund_unsent`, written in migration 9's own
    /// words, and 18's `is_unclaimed`) say what the lifecycle says: open exactly in `Lifecycle.openStates`, a notice unsent
    /// only in its flagged state.
    @Test(arguments: StoreEngine.available) func theIndexedColumnsAgreeWithTheLifecycle(_ engine: StoreEngine) async throws {
        let store = try await engine.freshStore()
        for state in PurchaseState.recorded {
            try await addPurchase(store, TransactionID(state.rawValue), original: TransactionID(state.rawValue), user: "u", product: "coins.100",
                                  state: state.rawValue, type: "consumable")
        }
        let columns = try await store.executor.run { connection in
            try connection.query("""
                SELECT state, CASE WHEN is_open THEN 1 ELSE 0 END, CASE WHEN refund_unsent THEN 1 ELSE 0 END, CASE WHEN is_unclaimed THEN 1 ELSE 0 END
                FROM purchases
                """).map { row in (state: row[0].string ?? "", open: row[1].int64 == 1, unsent: row[2].int64 == 1, unclaimed: row[3].int64 == 1) }
        }
        #expect(columns.count == PurchaseState.recorded.count)
        for column in columns {
            let state = try #require(PurchaseState(rawValue: column.state))
            #expect(column.open == Lifecycle.openStates.contains(state), "is_open of \(state)")
            #expect(column.unsent == (state == Lifecycle.flaggedState), "refund_unsent of \(state)")
            #expect(column.unclaimed == (state == .unclaimed), "is_unclaimed of \(state)")
        }
    }
}

import Database
import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// The lifecycle as the repository carries it out, in memory and on both engines: product types, refunds in any order,
/// reversed refunds, subscriptions ending; and the migration of a store of the previous schema.
@Suite struct PurchaseLifecycleStoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)

    func purchase(_ id: TransactionID, user: UserID = "user-1", product: ProductID = "coins.100", type: ProductType = .consumable,
                  original: TransactionID? = nil, at time: Date = t0) -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: product, productType: type, quantity: 1,
                       purchaseTime: time, originalTransactionId: original)
    }

    /// Records each of `records` verified and grants it 100 coins.
    func grantCoins(_ records: [PurchaseRecord], in store: any TestedRepository) async throws {
        for record in records {
            _ = try await store.recordVerified(record, at: Self.t0)
            _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: Self.t0)
        }
    }

    @Test(arguments: RepositoryKind.available) func aRefundBeforeItsPurchaseKeepsThePurchaseFromBeingGranted(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let record = purchase("r-1")
        #expect(try await store.revoke(record.key, at: Self.t0) == .recordedBeforePurchase)
        #expect(try await store.revoke(record.key, at: Self.t0) == .alreadyRevoked, "a repeated refund changes nothing")
        #expect(try await store.recordVerified(record, at: Self.t0) == .revokedEarlier)
        #expect(try await store.recordVerified(record, at: Self.t0) == .existing(state: .revoked, userId: "user-1"))
        #expect(try await store.grant(record.key, items: [.currency("coins", 100)], at: Self.t0) == .notGrantable(state: .revoked))
        #expect(try await store.balances(of: "user-1").isEmpty, "never granted")
        #expect(try await store.purchase(record.key)?.state == .revoked)
    }

    /// A due refund's claw-back (`refund.due`, with claw-back on) can come late, parked behind the user's other messages:
    /// by then the store may have refunded the purchase and reversed that refund. It takes back only from a purchase still
    /// flagged refund-due; what was learned since stands.
    @Test(arguments: RepositoryKind.available) func aLateClawBackLeavesAPurchaseWhoseRefundWasReversed(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let (late, due) = (purchase("cb-1", user: "user-cb"), purchase("cb-2", user: "user-cb"))
        try await grantCoins([late, due], in: store)
        let flagged = try await store.sweepDue(store: .appstore, deadline: 24 * 3600, now: Self.t0.addingTimeInterval(25 * 3600))
        #expect(Set(flagged.map(\.record.key.transactionId)) == ["cb-1", "cb-2"])
        #expect(try await store.revoke(late.key, decidedAt: Self.t0.addingTimeInterval(26 * 3600), at: Self.t0) == .revoked(shortfall: [:]))
        guard case .reinstated = try await store.reinstate(late.key, items: [.currency("coins", 100)], decidedAt: Self.t0.addingTimeInterval(27 * 3600),
                                                           at: Self.t0) else {
            Issue.record("the reversal did not grant again")
            return
        }
        #expect(try await store.balances(of: "user-cb") == ["coins": 200])
        #expect(try await store.revoke(late.key, onlyIfDue: true, at: Self.t0) == .notRevocable(state: .finished))
        #expect(try await store.balances(of: "user-cb") == ["coins": 200], "the reversed refund's coins stay")
        // The control: a purchase still flagged is clawed back, once.
        #expect(try await store.revoke(due.key, onlyIfDue: true, at: Self.t0) == .revoked(shortfall: [:]))
        #expect(try await store.revoke(due.key, onlyIfDue: true, at: Self.t0) == .alreadyRevoked)
        #expect(try await store.balances(of: "user-cb") == ["coins": 100])
        #expect(try await store.bookMismatches().isEmpty)
    }

    @Test(arguments: RepositoryKind.available) func aReversedRefundGrantsAgainOnceAndTheLedgerBalances(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let record = purchase("rr-1", user: "user-rr")
        _ = try await store.recordVerified(record, at: Self.t0)
        _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: Self.t0)
        #expect(try await store.revoke(record.key, at: Self.t0) == .revoked(shortfall: [:]))
        #expect(try await store.balances(of: "user-rr") == ["coins": 0])
        guard case .reinstated(let granted, let ids, let balances, _) = try await store.reinstate(record.key, items: [.currency("coins", 999)], at: Self.t0) else {
            Issue.record("not reinstated"); return
        }
        #expect(ids.count == 1)
        #expect(balances == ["coins": 100])
        #expect(granted == [.currency("coins", 100)])
        #expect(try await store.balances(of: "user-rr") == ["coins": 100], "what the refund took, not the fallback items")
        #expect(try await store.reinstate(record.key, items: [], at: Self.t0) == .notRevoked(state: .finished), "once")
        #expect(try await store.balances(of: "user-rr") == ["coins": 100])
        #expect(try await store.grantedItems(record.key) == [.currency("coins", 100)])
        // Refunded again after the reversal: what the purchase gives now is taken back, once more.
        #expect(try await store.revoke(record.key, at: Self.t0) == .revoked(shortfall: [:]))
        #expect(try await store.balances(of: "user-rr") == ["coins": 0])
        #expect(try await store.bookMismatches() == [])
    }

    /// 100 coins granted, 70 spent, the refund takes back the 30 left (shortfall 70): its reversal gives back those 30,
    /// not 100. The user is where they were before the refund; a second refund and reversal take and give the same.
    @Test(arguments: RepositoryKind.available) func aReversedRefundGivesBackWhatTheRefundTookNotWhatWasSpent(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let (record, spentAll) = (purchase("sf-1", user: "user-sf"), purchase("sf-2", user: "user-sa"))
        try await grantCoins([record, spentAll], in: store)
        // Spent in the game.
        try await store.setBalance(of: "user-sf", "coins", to: 30)
        try await store.setBalance(of: "user-sa", "coins", to: 0)
        #expect(try await store.revoke(record.key, at: Self.t0) == .revoked(shortfall: ["coins": 70]))
        #expect(try await store.balances(of: "user-sf") == ["coins": 0])
        for round in 1...2 {
            guard case .reinstated(let items, _, let balances, _) = try await store.reinstate(record.key, items: [.currency("coins", 100)], at: Self.t0) else {
                Issue.record("not reinstated"); return
            }
            #expect(items == [.currency("coins", 30)] && balances == ["coins": 30], "round \(round): what the refund took")
            #expect(try await store.balances(of: "user-sf") == ["coins": 30], "round \(round): as before the refund")
            #expect(try await store.grantedItems(record.key) == [.currency("coins", 30)])
            #expect(try await store.revoke(record.key, at: Self.t0) == .revoked(shortfall: [:]))
        }
        // All of it spent: the refund took nothing, and its reversal gives nothing (not the catalog's items either).
        #expect(try await store.revoke(spentAll.key, at: Self.t0) == .revoked(shortfall: ["coins": 100]))
        #expect(try await store.reinstate(spentAll.key, items: [.currency("coins", 100)], at: Self.t0) == .reinstated(items: [], ledgerEntryIds: [], balances: [:]))
        #expect(try await store.balances(of: "user-sa") == ["coins": 0])
    }

    /// Two refunds of one user's coins racing the game spending them (other workers, another connection): each takes what
    /// the other and the game left, so the balance ends at zero with the rest as shortfall; none reads the balance before
    /// the spend and takes more than is there (which broke `amount >= 0` and sent the refund to the dead letters).
    /// PostgreSQL only: SQLite runs one writer at a time.
    @Test(.enabled(if: StoreEngine.postgres.enabled)) func refundsRacingTheGameSpendingNeverTakeMoreThanTheBalance() async throws {
        let url = try await StoreEngine.postgres.freshURL()
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        let (first, second) = (purchase("race-1", user: "user-race"), purchase("race-2", user: "user-race"))
        for record in [first, second] {
            _ = try await store.recordVerified(record, at: Self.t0)
            _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: Self.t0)
        }
        let (game, observer) = (try PostgresConnection(url: url), try PostgresConnection(url: url))
        try game.query("BEGIN")
        try game.query("UPDATE balances SET amount = 30 WHERE user_id = 'user-race'") // 170 spent, not committed yet
        // One store per refunding worker: a store runs its calls one at a time.
        // Their waits unbounded: how long the test takes to see them waiting is not what is tested (StoreLockWaitTests is).
        let (refunder1, refunder2) = (try SQLPurchaseStore(url: url, lockTimeout: .zero), try SQLPurchaseStore(url: url, lockTimeout: .zero))
        let refunds = [Task { try await refunder1.revoke(first.key, at: Self.t0) }, Task { try await refunder2.revoke(second.key, at: Self.t0) }]
        try await waitUntil("both refunds wait for the game's spend") {
            try observer.query("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").first?[0].int64 == 2
        }
        try game.query("COMMIT")
        var shortfall: Int64 = 0
        for refund in refunds {
            guard case .revoked(let missing) = try await refund.value else { Issue.record("not revoked"); continue }
            shortfall += missing["coins"] ?? 0
        }
        #expect(shortfall == 170, "the 30 left taken back, the rest recorded as spent")
        #expect(try await store.balances(of: "user-race") == ["coins": 0])
        #expect(try await store.states(of: [first.key, second.key]) == [first.key: .revoked, second.key: .revoked])
    }

    @Test(arguments: RepositoryKind.available) func aRefundReversedBeforeThePurchaseArrivesLetsItBeGranted(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let record = purchase("rt-1")
        #expect(try await store.reinstate(record.key, items: [], at: Self.t0) == .notRevoked(state: .unseen), "nothing to reverse yet")
        #expect(try await store.revoke(record.key, at: Self.t0) == .recordedBeforePurchase)
        #expect(try await store.reinstate(record.key, items: [], at: Self.t0) == .tombstoneCleared)
        #expect(try await store.recordVerified(record, at: Self.t0) == .recorded)
        guard case .granted = try await store.grant(record.key, items: [.currency("coins", 100)], at: Self.t0) else { Issue.record("not granted"); return }
        #expect(try await store.balances(of: "user-1") == ["coins": 100])
    }

    @Test(arguments: RepositoryKind.available) func aPurchaseRevokedBeforeItsGrantIsReinstatedWithTheCatalogsItems(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let record = purchase("rv-1", user: "user-rv", product: "adfree", type: .nonConsumable)
        _ = try await store.recordVerified(record, at: Self.t0)
        #expect(try await store.revoke(record.key, at: Self.t0) == .revoked(shortfall: [:]))
        guard case .reinstated = try await store.reinstate(record.key, items: [.entitlement("adfree")], at: Self.t0) else { Issue.record("not reinstated"); return }
        #expect(try await store.entitlements(of: "user-rv", at: Self.t0).keys.sorted() == ["adfree"])
        #expect(try await store.bookMismatches() == [], "the re-grant is its grant")
    }

    @Test(arguments: RepositoryKind.available) func onlyConsumablesAreFlaggedAtTheDeadline(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let now = Self.t0.addingTimeInterval(48 * 3600)
        let records = ProductType.allCases.map { purchase("t-\($0.rawValue)", product: "p-\($0.rawValue)", type: $0) }
        for record in records {
            _ = try await store.recordVerified(record, at: Self.t0)
            _ = try await store.grant(record.key, items: [record.productType == .consumable ? .currency("coins", 1) : .entitlement("e-\(record.productId)")],
                                      at: Self.t0)
        }
        let flagged = try await store.sweepDue(store: .appstore, deadline: 24 * 3600, now: now)
        #expect(flagged.map(\.record.key.transactionId) == ["t-consumable"])
        #expect(flagged.first?.record.productType == .consumable)
        for record in records where record.productType != .consumable {
            #expect(try await store.purchase(record.key)?.state == .granted, "a \(record.productType) is never flagged")
        }
    }

    @Test(arguments: RepositoryKind.available) func aSubscriptionEndsWithItsExpiryAndRenewalsExtendIt(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let first = purchase("sub-1", user: "user-s", product: "pass.monthly", type: .autoRenewable, original: "sub-1")
        let renewal = purchase("sub-2", user: "user-s", product: "pass.monthly", type: .autoRenewable, original: "sub-1", at: Self.t0.addingTimeInterval(30 * 86_400))
        _ = try await store.recordVerified(first, at: Self.t0)
        _ = try await store.grant(first.key, items: [.entitlement("pass", until: Self.t0.addingTimeInterval(30 * 86_400))], at: Self.t0)
        #expect(try await store.owner(store: .appstore, originalTransactionId: "sub-1") == "user-s")
        _ = try await store.recordVerified(renewal, at: Self.t0)
        _ = try await store.grant(renewal.key, items: [.entitlement("pass", until: Self.t0.addingTimeInterval(60 * 86_400))], at: Self.t0)
        let during = Self.t0.addingTimeInterval(45 * 86_400)
        #expect(try await store.entitlements(of: "user-s", at: during) == ["pass": Self.t0.addingTimeInterval(60 * 86_400)], "the renewal extended it")
        // The current period's expiry (a GRACE_PERIOD_EXPIRED, say) ends it now, before its paid end, and the earlier periods.
        let early = Self.t0.addingTimeInterval(10 * 86_400)
        #expect(try await store.expireSubscription(renewal.key, at: early) == .ended(entitlements: ["pass"]))
        #expect(try await store.entitlements(of: "user-s", at: early).isEmpty, "the first period's too")
        #expect(try await store.expireSubscription(renewal.key, at: during) == .nothingToEnd(state: .granted))
        #expect(try await store.expireSubscription(PurchaseKey(store: .appstore, transactionId: "sub-9"), at: during) == .nothingToEnd(state: .unseen))
        // A non-consumable never expires.
        let adfree = purchase("nc-1", user: "user-s", product: "adfree", type: .nonConsumable, original: "nc-1")
        _ = try await store.recordVerified(adfree, at: Self.t0)
        _ = try await store.grant(adfree.key, items: [.entitlement("adfree")], at: Self.t0)
        #expect(try await store.expireSubscription(adfree.key, at: during) == .nothingToEnd(state: .granted))
        #expect(try await store.entitlements(of: "user-s", at: during).keys.sorted() == ["adfree"])
    }

    @Test(arguments: RepositoryKind.available) func aRestoreUnderAnotherUserMovesAnEntitlementOnlyUnderTransfer(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let adfree = purchase("tr-1", user: "user-a", product: "adfree", type: .nonConsumable)
        let coins = purchase("tr-2", user: "user-a")
        for (record, item) in [(adfree, GrantItem.entitlement("adfree")), (coins, .currency("coins", 100))] {
            _ = try await store.recordVerified(record, at: Self.t0)
            _ = try await store.grant(record.key, items: [item], at: Self.t0)
        }
        #expect(try await store.transfer(adfree.key, to: "user-b", policy: .keep, at: Self.t0) == .refused(owner: "user-a", reason: .ownedByAnotherUser))
        #expect(try await store.entitlements(of: "user-b", at: Self.t0).isEmpty)
        #expect(try await store.transfer(adfree.key, to: "user-b", policy: .transfer, at: Self.t0) == .transferred(from: "user-a", items: [.entitlement("adfree")]))
        #expect(try await store.transfer(adfree.key, to: "user-b", policy: .transfer, at: Self.t0) == .alreadyOwned, "moved once")
        #expect(try await store.entitlements(of: "user-b", at: Self.t0).keys.sorted() == ["adfree"])
        #expect(try await store.entitlements(of: "user-a", at: Self.t0).isEmpty, "one owner at a time")
        #expect(try await store.purchase(adfree.key)?.userId == "user-b")
        // Coins are never granted twice, whatever the policy.
        #expect(try await store.transfer(coins.key, to: "user-b", policy: .transfer, at: Self.t0) == .refused(owner: "user-a", reason: .transactionOfAnotherUser))
        #expect(try await store.balances(of: "user-b").isEmpty)
        #expect(try await store.balances(of: "user-a") == ["coins": 100])
        // A refund after the move takes the entitlement from whoever holds it.
        #expect(try await store.revoke(adfree.key, at: Self.t0) == .revoked(shortfall: [:]))
        #expect(try await store.entitlements(of: "user-b", at: Self.t0).isEmpty)
        #expect(try await store.transfer(adfree.key, to: "user-a", policy: .transfer, at: Self.t0) == .refused(owner: "user-b", reason: .transactionOfAnotherUser))
        #expect(try await store.bookMismatches().isEmpty)
    }

    /// A store of the previous schema (version 3), with purchases and a ledger, migrated: nothing lost, types named
    /// from the catalog, `unknown` where the catalog does not name the product (never flagged, counted).
    @Test(arguments: StoreEngine.available) func aPopulatedStoreOfThePreviousSchemaMigrates(_ engine: StoreEngine) async throws {
        let url = try await engine.freshURL()
        let store = try SQLPurchaseStore(url: url)
        #expect(try await store.migrate(through: 3) == [1, 2, 3])
        let raw: any SQLConnection = url.hasPrefix("sqlite:") ? try SQLiteConnection(path: String(url.dropFirst("sqlite:".count))) : try PostgresConnection(url: url)
        let old = PurchaseTime.milliseconds(Self.t0)
        for (id, product, state) in [("m-1", "coins.100", "granted"), ("m-2", "adfree", "granted"), ("m-3", "retired.item", "granted"), ("m-4", "coins.100", "finished")] {
            try raw.query("""
                INSERT INTO purchases (store, transaction_id, user_id, product_id, quantity, purchase_time, state, verified_at, granted_at)
                VALUES ('appstore', $1, 'user-m', $2, 1, $3, $4, $3, $3)
                """, [.text(id), .text(product), .integer(old), .text(state)])
        }
        try raw.query("""
            INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, created_at)
            VALUES ('appstore', 'm-1', 'grant', 'user-m', 'currency', 'coins', 100, $1), ('appstore', 'm-4', 'grant', 'user-m', 'currency', 'coins', 100, $1)
            """, [.integer(old)])
        try raw.query("INSERT INTO balances (user_id, currency, amount) VALUES ('user-m', 'coins', 200)")

        #expect(try await store.migrate() == Array(4...latestSchemaVersion))
        #expect(try await store.assignProductTypes(["coins.100": .consumable, "adfree": .nonConsumable], store: .appstore) == 3)
        #expect(try await store.assignProductTypes(["coins.100": .consumable], store: .appcoins) == 0, "another store's namespace")
        #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "m-2"))?.productType == .nonConsumable)
        #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "m-3"))?.productType == .unknown)
        #expect(try await store.statistics().unknownProductType == 1)

        // The ledger kept its rows and ids; new entries follow them.
        let before = try await store.grantedItems(PurchaseKey(store: .appstore, transactionId: "m-1"))
        #expect(before == [.currency("coins", 100)])
        let next = purchase("m-5", user: "user-m")
        _ = try await store.recordVerified(next, at: Self.t0)
        guard case .granted(let ids, _, _, _) = try await store.grant(next.key, items: [.currency("coins", 100)], at: Self.t0) else { Issue.record("not granted"); return }
        #expect(ids.first.map { $0 > 2 } == true, "ids continue after the migrated rows: \(ids)")

        let flagged = try await store.sweepDue(store: .appstore, deadline: 24 * 3600, now: Self.t0.addingTimeInterval(48 * 3600))
        #expect(Set(flagged.map(\.record.key.transactionId)) == ["m-1", "m-5"], "only unfinished consumables: not ad-free, not the unknown product")
        #expect(try await store.audit().balanceMismatches.isEmpty)
    }

    /// The store's statements are prepared once per connection. One first run while `purchases` was empty, as in every
    /// new deployment, must still find a purchase by its key once the table has grown: a generic plan made on the
    /// empty table scans the index on (store, original_transaction_id) by its store column, i.e. every row.
    /// The latest refund decision read back is the one taken: a reversal decided after the refund replaces it, an older
    /// decision (outdated) does not, and a purchase no decision was taken about has none.
    @Test(arguments: StoreEngine.available) func theLatestRefundDecisionTakenIsReadBack(_ engine: StoreEngine) async throws {
        let store = try SQLPurchaseStore(url: try await engine.freshURL())
        try await store.migrate()
        func day(_ n: Double) -> Date { Self.t0.addingTimeInterval(n * 86_400) }
        let (refunded, untouched) = (purchase("d-1"), purchase("d-2"))
        try await grantCoins([refunded, untouched], in: store)
        #expect(try await store.latestRefundDecision(refunded.key) == nil)
        #expect(try await store.revoke(refunded.key, decidedAt: day(1), at: day(1)) == .revoked(shortfall: [:]))
        #expect(try await store.latestRefundDecision(refunded.key) == day(1))
        let reversal = try await store.reinstate(refunded.key, items: [], decidedAt: day(3), at: day(3))
        guard case .reinstated = reversal else { Issue.record("not reinstated: \(reversal)"); return }
        #expect(try await store.revoke(refunded.key, decidedAt: day(2), at: day(4)) == .outdated)
        #expect(try await store.latestRefundDecision(refunded.key) == day(3), "the reversal, not the older refund that came after it")
        #expect(try await store.latestRefundDecision(untouched.key) == nil)
    }

    @Test(TestServices.postgres) func aLookupFirstRunOnAnEmptyStoreStillUsesThePurchaseKey() async throws {
        let url = try await StoreEngine.postgres.freshURL()
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        for n in 0..<8 { #expect(try await store.lifecycleState(of: PurchaseKey(store: .appstore, transactionId: "t\(n)")) == .unseen) }
        try PostgresConnection(url: url).query("""
            INSERT INTO purchases (store, transaction_id, original_transaction_id, user_id, product_id, quantity, purchase_time, state)
            SELECT 'appstore', 't' || n, 't' || n, 'user', 'coins.100', 1, n, 'verified' FROM generate_series(1, 20000) AS n
            """)
        let plan = try await store.executor.run { connection -> String in
            let name = try connection.query("SELECT name FROM pg_prepared_statements WHERE statement LIKE 'SELECT p.state, p.user_id, p.product_type,%'")
            return try connection.query("EXPLAIN EXECUTE \(name.first?[0].string ?? "missing")('appstore', 't7')").compactMap { $0[0].string }
                .joined(separator: "\n")
        }
        #expect(plan.contains("purchases_pkey"), "\(plan)")
    }
}

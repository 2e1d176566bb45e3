import Database
import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// A batch's grants of currencies, decided from the balances it read and written at its end (`applyDeferring`), leave
/// what grants made one by one leave, and a balance changed by someone else meanwhile fails the batch rather than
/// reporting a balance that is not so.
@Suite struct DeferredGrantStoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_500_000)

    /// 150 purchases of 13 users (more than one batch's reserved ids, several grants per user), each verified.
    static let purchases: [PurchaseRecord] = (0..<150).map { index in
        PurchaseRecord(key: PurchaseKey(store: index % 4 == 0 ? .appcoins : .appstore, transactionId: "g\(index)"), userId: "user-\(index % 13)",
                       productId: "coins.\(index % 3)", productType: index % 10 == 9 ? .nonConsumable : .consumable, quantity: 1 + index % 3,
                       purchaseTime: t0)
    }

    static func items(_ index: Int) -> [GrantItem] {
        switch index % 10 {
        case 9: [.entitlement("adfree")]
        case 7: [.currency("coins", Int64(10 * (1 + index % 3))), .currency("gems", 2), .entitlement("vip")]
        default: [.currency("coins", Int64(10 * (1 + index % 3)))]
        }
    }

    /// Grants, a repeat of a grant made in the same batch, a refund in the middle (which changes a balance the batch
    /// read), and grants to that user after it. The outcomes without their ledger ids (a batch may skip ids), and the
    /// ids of each purchase's grant.
    static func play(_ store: SQLPurchaseStore) async throws -> (outcomes: [String], ids: [PurchaseKey: [Int64]]) {
        var outcomes: [String] = []
        var ids: [PurchaseKey: [Int64]] = [:]
        func note(_ key: PurchaseKey, _ outcome: GrantOutcome) {
            guard case .granted(let granted, let balances, _, _) = outcome else { return outcomes.append("\(outcome)") }
            ids[key] = granted
            outcomes.append("granted \(granted.count) entries, balances \(balances.sorted { $0.key < $1.key })")
        }
        for (index, purchase) in purchases.enumerated() {
            note(purchase.key, try await store.grant(purchase.key, items: items(index), at: t0.addingTimeInterval(Double(index))))
            if index == 20 { note(purchases[14].key, try await store.grant(purchases[14].key, items: items(14), at: t0)) }
            if index == 70 { outcomes.append("\(try await store.revoke(purchases[1].key, at: t0.addingTimeInterval(500)))") }
        }
        return (outcomes, ids)
    }

    static func verified(_ engine: StoreEngine) async throws -> SQLPurchaseStore {
        let store = try await engine.freshStore()
        for purchase in purchases { _ = try await store.recordVerified(purchase, at: t0) }
        return store
    }

    static func table(_ store: SQLPurchaseStore, _ query: String) async throws -> [[SQLValue]] {
        try await store.executor.run { connection in try connection.query(query).map { Array($0) } }
    }

    @Test(arguments: StoreEngine.available) func aBatchGrantsAsGrantsOneByOneDo(_ engine: StoreEngine) async throws {
        let (alone, batched) = (try await Self.verified(engine), try await Self.verified(engine))
        let expected = try await Self.play(alone)
        let outcomes = try await batched.batch {
            try await batched.readAhead(Self.purchases.map(\.key), ownersBalances: true)
            return try await Self.play(batched)
        }
        #expect(outcomes.outcomes == expected.outcomes, "the outcomes (with the balances they report) of grants in a batch")
        // The ids each grant reported are its entries'.
        let entries = try await Self.table(batched, "SELECT id, store, transaction_id FROM ledger WHERE entry_kind = 'grant'")
        var idsOfPurchase: [PurchaseKey: [Int64]] = [:]
        for row in entries {
            guard let id = row[0].int64, let store = row[1].string.flatMap(Store.init(rawValue:)), let transaction = row[2].string.map({ TransactionID($0) }) else { continue }
            idsOfPurchase[PurchaseKey(store: store, transactionId: transaction), default: []].append(id)
        }
        #expect(outcomes.ids.count == Self.purchases.count && outcomes.ids.mapValues { $0.sorted() } == idsOfPurchase.mapValues { $0.sorted() })
        let columns = "store, transaction_id, entry_kind, user_id, item_kind, code, amount, shortfall, expires_at, created_at"
        for query in ["SELECT \(columns) FROM ledger ORDER BY id", "SELECT * FROM balances ORDER BY user_id, currency",
                      "SELECT * FROM entitlements ORDER BY user_id, entitlement, store, transaction_id", "SELECT * FROM purchases ORDER BY store, transaction_id"] {
            let (rows, expectedRows) = (try await Self.table(batched, query), try await Self.table(alone, query))
            #expect(rows.count == expectedRows.count && !rows.isEmpty, "\(query)")
            let mismatch = zip(rows, expectedRows).first { $0 != $1 }
            #expect(mismatch == nil, "\(query): the first row that differs (batched, one by one): \(String(describing: mismatch))")
        }
    }

    /// PostgreSQL (on SQLite a batch holds the whole database): a user without a balance when the batch read it is given
    /// one by another worker before the batch ends; the batch fails, retriably, and leaves nothing.
    @Test(arguments: StoreEngine.available.filter { $0 == .postgres })
    func aBalanceChangedByAnotherWorkerFailsTheBatch(_ engine: StoreEngine) async throws {
        let url = try await engine.freshURL()
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        let other = try SQLPurchaseStore(url: url)
        let purchase = Self.purchases[0]
        _ = try await store.recordVerified(purchase, at: Self.t0)
        let error = await #expect(throws: DatabaseError.self) {
            try await store.batch {
                try await store.readAhead([purchase.key], ownersBalances: true)
                let outcome = try await store.grant(purchase.key, items: [.currency("coins", 10)], at: Self.t0)
                #expect("\(outcome)".contains("[coins: 10]"), "the balance the grant reports: \(outcome)")
                _ = try await other.executor.run { connection in
                    try connection.query("INSERT INTO balances (user_id, currency, amount) VALUES ($1, 'coins', 5)", [.text(purchase.userId)])
                }
            }
        }
        #expect(error?.isRetriable == true)
        #expect(try await store.balances(of: purchase.userId) == ["coins": 5])
        #expect(try await store.states(of: [purchase.key]) == [purchase.key: .verified])
        #expect("\(try await store.grant(purchase.key, items: [.currency("coins", 10)], at: Self.t0))".contains("[coins: 15]"), "granted when tried again")
    }
}

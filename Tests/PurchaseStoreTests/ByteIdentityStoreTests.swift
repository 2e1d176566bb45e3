import Database
import Foundation
import PurchaseDomain
@testable import PurchaseStore
import TestData
import Testing
import TestSupport

/// Users and transactions whose ids Swift's `String` takes as equal but whose bytes differ are different users and
/// different transactions, in a batch as one by one: the store keys them as the database does.
@Suite struct ByteIdentityStoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_600_000)

    static func coins(_ id: TransactionID, _ user: UserID) -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: "coins.100", productType: .consumable,
                       quantity: 1, purchaseTime: t0)
    }

    /// Text as its bytes: `==` on `String`s (and on rows of them) would take the spellings this suite is about as equal.
    static func bytes(_ texts: [String]) -> [[UInt8]] { texts.map { Array($0.utf8) } }
    static func bytes(_ rows: [[String]]) -> [[[UInt8]]] { rows.map(bytes) }
    static func bytes(_ rows: [[SQLValue]]) -> [[[UInt8]]] { rows.map { row in bytes(row.map { $0.string ?? "NULL" }) } }

    /// Sums of the ledger's currency entries by user (bytes) and currency, as the database holds them.
    static func ledgerSums(_ store: SQLPurchaseStore) async throws -> [[String]] {
        try await store.executor.run { connection in
            try connection.query("SELECT user_id, code, sum(amount) FROM ledger WHERE item_kind = 'currency' GROUP BY user_id, code ORDER BY user_id, code")
                .map { row in row.map { $0.string ?? "" } }
        }
    }

    static func balanceRows(_ store: SQLPurchaseStore) async throws -> [[String]] {
        try await store.executor.run { connection in
            try connection.query("SELECT user_id, currency, amount FROM balances ORDER BY user_id, currency").map { row in row.map { $0.string ?? "" } }
        }
    }

    /// A grant's answer without its ledger entry ids (a batch reserves ids ahead and may skip some), balances in order.
    static func described(_ outcome: GrantOutcome) -> String {
        func sorted(_ balances: [ItemCode: Int64]) -> String { "\(balances.sorted { $0.key < $1.key })" }
        switch outcome {
        case .granted(let ids, let balances, let endsBy, let ended): return "granted \(ids.count) entries, balances \(sorted(balances)), \(String(describing: endsBy)), \(ended)"
        case .alreadyGranted(let items, let balances, let ended): return "already granted \(items), balances \(sorted(balances)), \(ended)"
        case .notGrantable(let state): return "not grantable \(String(describing: state))"
        }
    }

    /// 20 purchases of 100 coins for each of two users, "café" precomposed and decomposed, granted in one batch (as the
    /// granter does a partition's waiting messages): 2,000 coins each, each grant reporting its own user's balance, and the
    /// ledger equal to the balances.
    @Test(arguments: StoreEngine.available) func twoUsersWhoseIdsAreEqualStringsKeepTheirOwnCoins(_ engine: StoreEngine) async throws {
        let store = try await engine.freshStore()
        let users: [UserID] = ["caf\u{E9}", "cafe\u{301}"]
        let purchases = (0..<40).map { Self.coins("two-users-\($0)", users[$0 % 2]) }
        for purchase in purchases { #expect(try await store.recordVerified(purchase, at: Self.t0) == .recorded) }
        let reported = try await store.batch {
            try await store.readAhead(purchases.map(\.key), ownersBalances: true)
            var reported: [Int64] = []
            for purchase in purchases {
                guard case .granted(_, let balances, _, _) = try await store.grant(purchase.key, items: [.currency("coins", 100)], at: Self.t0) else {
                    Issue.record("\(purchase.key) not granted")
                    continue
                }
                reported.append(balances["coins"] ?? -1)
            }
            return reported
        }
        let running: [Int64] = (1...20).flatMap { count -> [Int64] in [Int64(count) * 100, Int64(count) * 100] }
        #expect(reported == running, "each grant reports its own user's balance")
        for user in users {
            #expect(try await store.balances(of: user) == ["coins": 2_000], "\(Array(user.rawValue.utf8))")
            #expect(try await store.holdings(of: user, at: Self.t0).balances == ["coins": 2_000])
        }
        #expect(Self.bytes(try await Self.ledgerSums(store)) == Self.bytes(try await Self.balanceRows(store)))
        #expect(try await store.audit().balanceMismatches.isEmpty)
    }

    /// Random purchases of users and transactions drawn from confusable spellings (canonically and compatibility
    /// equivalent, case variants, combining marks, emoji sequences, long ids), some repeated, recorded and granted in
    /// batches of random sizes as the verifier and the granter do, leave what the same calls one by one leave: the same
    /// answers, ledger, balances, entitlements and purchases, and the balances the bytes of each user add up to.
    @Test(arguments: StoreEngine.available) func randomBatchesOfConfusableIdsLeaveWhatOneByOneLeaves(_ engine: StoreEngine) async throws {
        for seed in [11, 12, 13] as [UInt64] {
            var generator = SeededGenerator(seed: seed)
            let spellings = ConfusableIdentifiers.all
            var purchases: [(record: PurchaseRecord, items: [GrantItem])] = []
            for index in 0..<60 {
                let user = UserID(spellings.randomElement(using: &generator)!)
                // Transaction ids of another store's shape (AppCoins order ids are the store's text): confusable too.
                let id = TransactionID(Bool.random(using: &generator) ? "t-\(index)" : spellings[index % spellings.count] + "#\(index / spellings.count)")
                let kind = Int.random(in: 0..<4, using: &generator)
                let record = PurchaseRecord(key: PurchaseKey(store: .appcoins, transactionId: id), userId: user,
                                            productId: kind == 3 ? "adfree" : "coins.100", productType: kind == 3 ? .nonConsumable : .consumable,
                                            quantity: 1, purchaseTime: Self.t0)
                purchases.append((record, kind == 3 ? [.entitlement(ItemCode(spellings[index % 4]))] : [.currency(kind == 2 ? "gems" : "coins", Int64(index + 1))]))
            }
            // Repeats of earlier purchases: answered "already granted" with the balances of their own user.
            let calls = purchases + (0..<15).map { _ in purchases.randomElement(using: &generator)! }
            let cuts = Set((0..<8).map { _ in Int.random(in: 1..<calls.count, using: &generator) })

            // The same calls in the same phases, once in batches (the verifier's records, then the granter's grants, each a batch
            // per run of messages), once one by one: only the batching differs.
            let (alone, batched) = (try await engine.freshStore(), try await engine.freshStore())
            var (expected, answers): ([String], [String]) = ([], [])
            var start = 0
            for end in cuts.sorted() + [calls.count] where end > start {
                let slice = calls[start..<end]
                start = end
                for call in slice { expected.append("\(try await alone.recordVerified(call.record, at: Self.t0))") }
                for call in slice { expected.append(Self.described(try await alone.grant(call.record.key, items: call.items, at: Self.t0))) }
                answers += try await batched.batch {
                    try await batched.readAhead(slice.map(\.record.key))
                    var recorded: [String] = []
                    for call in slice { recorded.append("\(try await batched.recordVerified(call.record, at: Self.t0))") }
                    return recorded
                }
                answers += try await batched.batch {
                    try await batched.readAhead(slice.map(\.record.key), ownersBalances: true)
                    var granted: [String] = []
                    for call in slice { granted.append(Self.described(try await batched.grant(call.record.key, items: call.items, at: Self.t0))) }
                    return granted
                }
            }
            #expect(Self.bytes(answers) == Self.bytes(expected), "seed \(seed): the same answers, in the same order")
            #expect(expected.contains { $0.hasPrefix("already") } && expected.contains { $0.hasPrefix("existing") }, "repeats were answered")

            let columns = "store, transaction_id, entry_kind, user_id, item_kind, code, amount, shortfall, expires_at, created_at"
            for query in ["SELECT \(columns) FROM ledger ORDER BY id", "SELECT * FROM balances ORDER BY user_id, currency",
                          "SELECT * FROM entitlements ORDER BY user_id, entitlement, store, transaction_id",
                          "SELECT * FROM purchases ORDER BY store, transaction_id"] {
                let (rows, expectedRows) = (try await DeferredGrantStoreTests.table(batched, query), try await DeferredGrantStoreTests.table(alone, query))
                #expect(Self.bytes(rows) == Self.bytes(expectedRows) && !rows.isEmpty, "seed \(seed): \(query)")
            }
            // What the bytes of each user add up to, granted once per transaction (the first record of a key is its owner).
            var owners: [[UInt8]: (user: [UInt8], items: [GrantItem])] = [:]
            for (record, items) in purchases where owners[Array(record.key.transactionId.rawValue.utf8)] == nil {
                owners[Array(record.key.transactionId.rawValue.utf8)] = (Array(record.userId.rawValue.utf8), items)
            }
            var sums: [[UInt8]: [ItemCode: Int64]] = [:]
            for (user, items) in owners.values {
                for item in items where item.kind == .currency { sums[user, default: [:]][item.code, default: 0] += item.amount }
            }
            for user in Set(purchases.map(\.record.userId)) {
                #expect(try await batched.balances(of: user) == sums[Array(user.rawValue.utf8)] ?? [:], "seed \(seed): \(Array(user.rawValue.utf8))")
            }
            #expect(Self.bytes(try await Self.ledgerSums(batched)) == Self.bytes(try await Self.balanceRows(batched)), "seed \(seed): the ledger is the balances")
        }
    }
}

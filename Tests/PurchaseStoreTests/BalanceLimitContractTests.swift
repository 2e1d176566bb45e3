import Database
import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// A balance holds at most `CurrencyAmounts.balanceLimit`: a grant, a batch's grant or a refund's reversal that would take
/// it past is refused (`BalanceOutOfRange`) with nothing written, never trapped on or stored as a floating-point number;
/// adjustments of any 64-bit amount are refused with their reason. The same on the in-memory store and both engines.
@Suite struct BalanceLimitContractTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_600_000)
    static let limit = CurrencyAmounts.balanceLimit

    static func purchase(_ id: TransactionID, _ user: UserID) -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: "coins.huge", productType: .consumable,
                       quantity: 1, purchaseTime: t0)
    }

    /// Whether `body` threw `BalanceOutOfRange` of `currency`.
    static func refused(_ currency: ItemCode, _ body: () async throws -> Void) async -> Bool {
        do {
            try await body()
            return false
        } catch let refusal as BalanceOutOfRange {
            return refusal.currency == currency && refusal.description.contains("\(limit)")
        } catch {
            Issue.record("not a balance refusal: \(error)")
            return false
        }
    }

    @Test(arguments: RepositoryKind.available) func aGrantPastTheLimitIsRefusedWithNothingWritten(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let (p1, p2, p3, p4, p5) = (Self.purchase("p1", "user-a"), Self.purchase("p2", "user-a"), Self.purchase("p3", "user-b"),
                                    Self.purchase("p4", "user-a"), Self.purchase("p5", "user-a"))
        for record in [p1, p2, p3, p4, p5] { #expect(try await store.recordVerified(record, at: Self.t0) == .recorded) }

        guard case .granted(_, let balances, _, _) = try await store.grant(p1.key, items: [.currency("coins", Self.limit - 10)], at: Self.t0) else {
            Issue.record("a grant up to the limit is made")
            return
        }
        #expect(balances == ["coins": Self.limit - 10])
        #expect(await Self.refused("coins") { _ = try await store.grant(p2.key, items: [.currency("coins", 11)], at: Self.t0) })
        #expect(await Self.refused("coins") { _ = try await store.grant(p5.key, items: [.currency("coins", .max)], at: Self.t0) },
                "an amount no balance holds is refused, not added")
        #expect(try await store.purchase(p2.key)?.state == .verified, "the refused purchase stays verified: never granted")
        #expect(try await store.grantedItems(p2.key).isEmpty)

        // In a batch: the refusal leaves the batch as it was, and the batch's next grant is made and committed with it.
        let granted = try await store.batch { () async throws -> GrantOutcome in
            try await store.readAhead([p2.key, p3.key], ownersBalances: true)
            #expect(await Self.refused("coins") { _ = try await store.grant(p2.key, items: [.currency("coins", 11)], at: Self.t0) })
            return try await store.grant(p3.key, items: [.currency("coins", 100)], at: Self.t0)
        }
        guard case .granted(_, ["coins": 100], _, _) = granted else {
            Issue.record("the batch's grant after a refusal is made: \(granted)")
            return
        }
        #expect(try await store.balances(of: "user-a") == ["coins": Self.limit - 10])
        guard case .granted(_, ["coins": Self.limit], _, _) = try await store.grant(p2.key, items: [.currency("coins", 10)], at: Self.t0) else {
            Issue.record("a grant reaching the limit exactly is made")
            return
        }

        // A refund's reversal giving back more than the balance can take is refused whole: the purchase stays revoked.
        #expect(try await store.revoke(p1.key, reason: "REFUND", decidedAt: Self.t0, onlyIfDue: false, share: nil, at: Self.t0) == .revoked(shortfall: [:]))
        #expect(try await store.balances(of: "user-a") == ["coins": 10])
        _ = try await store.grant(p4.key, items: [.currency("coins", Self.limit - 15)], at: Self.t0)
        #expect(await Self.refused("coins") {
            _ = try await store.reinstate(p1.key, items: [], decidedAt: Self.t0.addingTimeInterval(60), at: Self.t0.addingTimeInterval(60))
        })
        #expect(try await store.purchase(p1.key)?.state == .revoked)
        #expect(try await store.balances(of: "user-a") == ["coins": Self.limit - 5])
        #expect(try await store.balances(of: "user-b") == ["coins": 100])
        let mismatches = try await store.bookMismatches()
        #expect(mismatches.isEmpty, "\(mismatches)")
        if kind == .sqlite, let sql = store as? SQLPurchaseStore { #expect(try await Self.nonIntegerAmounts(sql) == 0) }
    }

    /// Balances and ledger amounts of a SQLite store that are not integers (a sum SQLite turned into a REAL).
    static func nonIntegerAmounts(_ store: SQLPurchaseStore) async throws -> Int64 {
        try await store.executor.run { connection in
            try connection.query("""
                SELECT (SELECT count(*) FROM balances WHERE typeof(amount) <> 'integer')
                     + (SELECT count(*) FROM ledger WHERE typeof(amount) <> 'integer' OR typeof(shortfall) <> 'integer')
                """).first?[0].int64 ?? -1
        }
    }

    /// What reached the store without the schema's bounds (an adjustment of the extremes a 64-bit integer holds) is
    /// refused with its reason, and leaves the books as they were.
    @Test(arguments: StoreEngine.available) func adjustmentsOfAnyAmountAreRefusedNotTrappedOn(_ engine: StoreEngine) async throws {
        let store = try await engine.freshStore()
        func adjustment(_ id: AdjustmentID, _ items: [GrantItem], reverses: AdjustmentID? = nil) -> Adjustment {
            Adjustment(id: id, userId: "bob", requestedBy: "support:ana", reason: "ticket \(id)", items: items, reverses: reverses)
        }
        #expect(try await store.adjust(adjustment("seed", [.currency("coins", 100)]), takeWhatIsLeft: false, at: Self.t0)
                == .applied(items: [.currency("coins", 100)], balances: ["coins": 100], shortfall: [:]))
        for (id, amount) in [("min", Int64.min), ("max", .max), ("past-item", CurrencyAmounts.itemLimit + 1), ("past-take", -CurrencyAmounts.itemLimit - 1)] {
            for takeWhatIsLeft in [false, true] {
                let outcome = try await store.adjust(adjustment(AdjustmentID(id), [.currency("coins", amount)]), takeWhatIsLeft: takeWhatIsLeft, at: Self.t0)
                guard case .refused(.amountOutOfRange, let detail) = outcome else {
                    Issue.record("\(id): \(outcome)")
                    continue
                }
                #expect(detail.contains("\(CurrencyAmounts.itemLimit)"), "\(detail)")
            }
        }
        // Legal amounts whose sum would pass the limit: a purchase of 999 × 10^12, then an adjustment of 10^12 more.
        let fill = Self.purchase("fill", "bob")
        _ = try await store.recordVerified(fill, at: Self.t0)
        _ = try await store.grant(fill.key, items: [.currency("coins", 999 * CurrencyAmounts.itemLimit)], at: Self.t0)
        let past = try await store.adjust(adjustment("past", [.currency("coins", CurrencyAmounts.itemLimit)]), takeWhatIsLeft: false, at: Self.t0)
        guard case .refused(.amountOutOfRange, let detail) = past else {
            Issue.record("a give past the limit is refused: \(past)")
            return
        }
        #expect(detail.contains("\(Self.limit)"), "\(detail)")
        #expect(try await store.balances(of: "bob") == ["coins": 999 * CurrencyAmounts.itemLimit + 100])
        // Taken and given back: a reversal is checked as a give is.
        #expect(try await store.adjust(adjustment("take", [.currency("coins", -CurrencyAmounts.itemLimit)]), takeWhatIsLeft: false, at: Self.t0)
                == .applied(items: [.currency("coins", -CurrencyAmounts.itemLimit)], balances: ["coins": 998 * CurrencyAmounts.itemLimit + 100], shortfall: [:]))
        #expect(try await store.adjust(adjustment("more", [.currency("coins", CurrencyAmounts.itemLimit)]), takeWhatIsLeft: false, at: Self.t0)
                == .applied(items: [.currency("coins", CurrencyAmounts.itemLimit)], balances: ["coins": 999 * CurrencyAmounts.itemLimit + 100], shortfall: [:]))
        guard case .refused(.amountOutOfRange, _) = try await store.adjust(adjustment("undo-take", [], reverses: "take"), takeWhatIsLeft: false, at: Self.t0) else {
            Issue.record("giving back a take past the limit is refused")
            return
        }
        #expect(try await store.balances(of: "bob") == ["coins": 999 * CurrencyAmounts.itemLimit + 100])
        let audit = try await store.audit()
        #expect(audit.isBalanced, "\(audit.balanceMismatches)")
        #expect(audit.currencyTotals == ["coins": 999 * CurrencyAmounts.itemLimit + 100])
        if engine == .sqlite { #expect(try await Self.nonIntegerAmounts(store) == 0) }
    }
    /// Below the store's checks, the databases refuse an amount that is not an integer: SQLite's REAL of an overflowing sum
    /// (migration 31's triggers, in the words of SQLite's own `sum`), PostgreSQL's BIGINT overflow (SQLSTATE 22003). Both are
    /// permanent errors (a refusal, never retried), and the balance stays as it was.
    @Test(arguments: StoreEngine.available) func anOverflowingSumIsAPermanentErrorNotAFloatingPointAmount(_ engine: StoreEngine) async throws {
        let store = try await engine.freshStore()
        _ = try await store.adjust(Adjustment(id: "seed", userId: "bob", requestedBy: "support:ana", reason: "seed", items: [.currency("coins", 100)]),
                                   takeWhatIsLeft: false, at: Self.t0)
        let statements = [
            "UPDATE balances SET amount = amount + 9223372036854775807 WHERE user_id = 'bob'",
            "INSERT INTO balances (user_id, currency, amount) VALUES ('bob', 'gems', 9223372036854775807 + 1)",
            """
            INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, created_at)
            VALUES ('adjustment', 'x', 'grant', 'bob', 'currency', 'coins', 9223372036854775807 + 1, 0)
            """,
        ] + (engine == .sqlite ? ["UPDATE ledger SET shortfall = 0.5", "SELECT sum(amount) FROM (SELECT 9223372036854775807 AS amount UNION ALL SELECT 1)"] : [])
        for statement in statements {
            do {
                _ = try await store.executor.run { connection in try connection.query(statement) }
                Issue.record("\(engine) accepted: \(statement)")
            } catch let error as DatabaseError {
                #expect(!error.isRetriable && !store.isTransient(error), "\(error)")
                #expect(engine == .postgres ? error.code == "22003" : error.message.contains("integer overflow"), "\(error)")
            }
        }
        #expect(try await store.balances(of: "bob") == ["coins": 100])
        #expect(try await store.audit().isBalanced)
        if engine == .sqlite { #expect(try await Self.nonIntegerAmounts(store) == 0) }
    }
}

import Database
import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// What the pipeline relies on from its repository, run on the in-memory one and on both engines.
@Suite struct PurchaseStoreConformanceTests {
    static let repositories = RepositoryKind.available
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)

    @Test(arguments: StoreEngine.available) func migrationsApplyOnce(_ engine: StoreEngine) async throws {
        let store = try SQLPurchaseStore(url: try await engine.freshURL())
        #expect(try await store.migrate() == Array(1...latestSchemaVersion))
        #expect(try await store.migrate() == [], "migrations apply once")
    }

    func purchase(_ id: TransactionID, user: UserID = "user-1", product: ProductID = "coins.100", type: ProductType = .consumable, at time: Date = t0) -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: product, productType: type, quantity: 1, purchaseTime: time)
    }

    @Test(arguments: repositories) func grantBeforeFinishAndEveryRepeatChangesNothing(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let record = purchase("1001")
        #expect(try await store.finish(record.key, at: Self.t0) == .notGranted(state: nil), "unknown purchase")
        #expect(try await store.recordVerified(record, at: Self.t0) == .recorded)
        #expect(try await store.recordVerified(record, at: Self.t0) == .existing(state: .verified, userId: "user-1"))
        #expect(try await store.finish(record.key, at: Self.t0) == .notGranted(state: .verified), "never finish what was not granted")

        let items: [GrantItem] = [.currency("coins", 100), .entitlement("adfree")]
        guard case .granted(let ids, let balances, _, _) = try await store.grant(record.key, items: items, at: Self.t0) else { Issue.record("not granted"); return }
        #expect(ids.count == 2)
        #expect(balances == ["coins": 100], "the balance the grant leaves")
        #expect(try await store.grant(record.key, items: items, at: Self.t0) == .alreadyGranted(items: items, balances: ["coins": 100]))
        #expect(try await store.balances(of: "user-1") == ["coins": 100], "granted exactly once")
        #expect(try await store.entitlements(of: "user-1").keys.sorted() == ["adfree"])

        #expect(try await store.finish(record.key, at: Self.t0) == .finished)
        #expect(try await store.finish(record.key, at: Self.t0) == .alreadyFinished)
        #expect(try await store.grant(record.key, items: items, at: Self.t0) == .alreadyGranted(items: items, balances: ["coins": 100]))
        #expect(try await store.recordVerified(record, at: Self.t0) == .existing(state: .finished, userId: "user-1"), "a restore replays it")
        #expect(try await store.balances(of: "user-1") == ["coins": 100])
    }

    @Test(arguments: repositories) func concurrentGrantsOfOnePurchaseGrantOnce(_ kind: RepositoryKind) async throws {
        let stores = try await kind.handles(4)
        let record = purchase("2002", user: "user-2")
        #expect(try await stores[0].recordVerified(record, at: Self.t0) == .recorded)
        let outcomes = try await withThrowingTaskGroup(of: GrantOutcome.self) { group in
            for store in stores { group.addTask { try await store.grant(record.key, items: [.currency("coins", 500)], at: Self.t0) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(outcomes.filter { if case .granted = $0 { true } else { false } }.count == 1)
        #expect(outcomes.filter { $0 == .alreadyGranted(items: [.currency("coins", 500)], balances: ["coins": 500]) }.count == 3)
        #expect(try await stores[0].balances(of: "user-2") == ["coins": 500])
    }

    @Test(arguments: repositories) func revocationClawsBackWithoutGoingNegative(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let first = purchase("3001", user: "user-3")
        let second = purchase("3002", user: "user-3")
        for record in [first, second] {
            _ = try await store.recordVerified(record, at: Self.t0)
            _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: Self.t0)
        }
        #expect(try await store.balances(of: "user-3") == ["coins": 200])
        #expect(try await store.revoke(first.key, at: Self.t0) == .revoked(shortfall: [:]))
        #expect(try await store.balances(of: "user-3") == ["coins": 100])
        #expect(try await store.revoke(first.key, at: Self.t0) == .alreadyRevoked)
        // The game spent 70 of the second purchase's coins before its refund arrived.
        try await store.setBalance(of: "user-3", "coins", to: 30)
        #expect(try await store.revoke(second.key, at: Self.t0) == .revoked(shortfall: ["coins": 70]))
        #expect(try await store.balances(of: "user-3") == ["coins": 0], "never negative; the shortfall is recorded instead")
        #expect(try await store.grant(second.key, items: [.currency("coins", 100)], at: Self.t0) == .notGrantable(state: .revoked))
        #expect(try await store.revoke(PurchaseKey(store: .appstore, transactionId: "unknown"), at: Self.t0) == .recordedBeforePurchase)
    }

    @Test(arguments: repositories) func threeConcurrentSweepersFlagEachDuePurchaseOnce(_ kind: RepositoryKind) async throws {
        let sweepers = try await kind.handles(3)
        let now = Self.t0.addingTimeInterval(48 * 3600)
        // 60 purchases older than 24 h (half granted), 20 recent, 10 finished old ones.
        for index in 0..<90 {
            let old = index < 60 || index >= 80
            let record = purchase("s\(index)", user: "u\(index % 7)", at: old ? Self.t0 : now.addingTimeInterval(-3600))
            _ = try await sweepers[0].recordVerified(record, at: Self.t0)
            if index % 2 == 0 || index >= 80 { _ = try await sweepers[0].grant(record.key, items: [.currency("coins", 1)], at: Self.t0) }
            if index >= 80 { _ = try await sweepers[0].finish(record.key, at: Self.t0) }
        }
        let flagged = try await withThrowingTaskGroup(of: [DuePurchase].self) { group in
            for sweeper in sweepers {
                group.addTask {
                    var mine: [DuePurchase] = []
                    while case let batch = try await sweeper.sweepDue(store: .appstore, deadline: 24 * 3600, now: now, limit: 7), !batch.isEmpty {
                        mine += batch
                    }
                    return mine
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        let ids = flagged.map(\.record.key.transactionId)
        #expect(ids.count == 60, "every due purchase flagged")
        #expect(Set(ids).count == ids.count, "none twice")
        #expect(Set(ids) == Set((0..<60).map { "s\($0)" }))
        #expect(flagged.filter { $0.previousState == .granted }.count == 30)
        #expect(try await sweepers[0].sweepDue(store: .appstore, deadline: 24 * 3600, now: now).isEmpty, "a later sweep finds nothing")
        let states = try await sweepers[0].states(of: (0..<90).map { PurchaseKey(store: .appstore, transactionId: "s\($0)") })
        #expect(states.values.filter { $0 == .refundDue }.count == 60)
        #expect(states.values.filter { $0 == .finished }.count == 10)
        #expect((60..<80).allSatisfy { [.verified, .granted].contains(states[PurchaseKey(store: .appstore, transactionId: "s\($0)")]) }, "the recent ones wait")

        // The outbox: every flagged purchase is waiting for its event until marked sent.
        let unsent = try await sweepers[1].unsentRefundNotices(store: .appstore, deadline: 24 * 3600, limit: 100)
        #expect(Set(unsent.map(\.record.key)) == Set(flagged.map(\.record.key)))
        try await sweepers[1].markRefundNoticesSent(Array(unsent.prefix(50).map(\.record.key)), at: now)
        #expect(try await sweepers[2].unsentRefundNotices(store: .appstore, deadline: 24 * 3600, limit: 100).count == 10)
    }

    /// What the sweeper asks the store about again (granted consumables with a token) is left by `sweepDue` when it says so,
    /// and flagged by `flagDue` once asked: only while still due, and once.
    @Test(arguments: repositories) func purchasesAskedAboutAgainAreFlaggedOnlyOnceAsked(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let now = Self.t0.addingTimeInterval(48 * 3600)
        func appCoins(_ id: TransactionID, token: Bool = true, granted: Bool = true, at time: Date = Self.t0) async throws -> PurchaseKey {
            let record = PurchaseRecord(key: PurchaseKey(store: .appcoins, transactionId: id), userId: "u", productId: "coins.100", productType: .consumable,
                                        quantity: 1, purchaseTime: time, packageName: "com.example.coins", purchaseToken: token ? "token-\(id)" : nil)
            _ = try await store.recordVerified(record, at: time)
            if granted { _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: time) }
            return record.key
        }
        let asked = try await appCoins("asked", at: Self.t0)
        let consumedSince = try await appCoins("consumed-since", at: Self.t0.addingTimeInterval(1))
        let finished = try await appCoins("finished", at: Self.t0.addingTimeInterval(2))
        _ = try await store.finish(finished, at: Self.t0)
        let recent = try await appCoins("recent", at: now.addingTimeInterval(-3600))
        _ = try await appCoins("verified-only", granted: false)
        _ = try await appCoins("no-token", token: false)

        #expect(Set(try await store.sweepDue(store: .appcoins, deadline: 86_400, now: now, limit: 1, leavingRecheckable: true)
            .map(\.record.key.transactionId)) == ["verified-only"])
        #expect(Set(try await store.sweepDue(store: .appcoins, deadline: 86_400, now: now, limit: 500, leavingRecheckable: true)
            .map(\.record.key.transactionId)) == ["no-token"], "nothing else, the rest asked about again")
        #expect(try await store.dueGrantedWithToken(store: .appcoins, deadline: 86_400, now: now).map(\.key) == [asked, consumedSince])
        _ = try await store.recordConsumed(consumedSince, at: now)
        let flagged = try await store.flagDue([asked, consumedSince, finished, recent], deadline: 86_400, now: now)
        #expect(flagged.map(\.record.key) == [asked], "not consumed since it was asked, finished, or not due yet")
        #expect(flagged.first?.previousState == .granted && flagged.first?.deadline == Self.t0.addingTimeInterval(86_400))
        #expect(try await store.flagDue([asked], deadline: 86_400, now: now).isEmpty, "once")
        #expect(try await store.purchase(asked)?.state == .refundDue)
    }

    /// Every App Store purchase the deadline flags (granted, verified, a charge nobody claimed) is listed for asking, a page
    /// at a time in purchase order, without being flagged; `flagDue` then flags each once, the unclaimed charge included.
    @Test(arguments: repositories) func everyDuePurchaseIsListedForAskingThenFlaggedOnce(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let now = Self.t0.addingTimeInterval(48 * 3600)
        func appStore(_ id: TransactionID, type: ProductType = .consumable, granted: Bool = true, unclaimed: Bool = false,
                      at time: Date) async throws -> PurchaseKey {
            let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: unclaimed ? .nobody : "u", productId: "coins.100",
                                        productType: type, quantity: 1, purchaseTime: time)
            if unclaimed { _ = try await store.recordUnclaimed(record, at: time); return record.key }
            _ = try await store.recordVerified(record, at: time)
            if granted { _ = try await store.grant(record.key, items: [type.isEntitlement ? .entitlement("adfree") : .currency("coins", 100)], at: time) }
            return record.key
        }
        let due = [try await appStore("a-granted", at: Self.t0), try await appStore("b-verified", granted: false, at: Self.t0.addingTimeInterval(1)),
                   try await appStore("c-unclaimed", unclaimed: true, at: Self.t0.addingTimeInterval(2))]
        let consumed = try await appStore("consumed", at: Self.t0)
        _ = try await store.recordConsumed(consumed, at: Self.t0)
        _ = try await appStore("adfree", type: .nonConsumable, at: Self.t0)
        _ = try await appStore("recent", at: now.addingTimeInterval(-3600))
        _ = try await appStore("recent-unclaimed", unclaimed: true, at: now.addingTimeInterval(-3600))

        let first = try await store.dueToAsk(store: .appstore, deadline: 86_400, now: now, after: nil, limit: 2)
        let second = try await store.dueToAsk(store: .appstore, deadline: 86_400, now: now, after: first.last, limit: 2)
        #expect((first + second).map(\.key) == due, "in purchase order, nothing else")
        #expect(try await store.states(of: due).values.allSatisfy { $0 != .refundDue }, "listing flags nothing")
        let flagged = try await store.flagDue(due + [consumed], deadline: 86_400, now: now)
        #expect(Set(flagged.map(\.record.key)) == Set(due))
        #expect(flagged.first { $0.record.key == due[2] }?.previousState == .unclaimed)
        #expect(try await store.flagDue(due, deadline: 86_400, now: now).isEmpty, "once")
        #expect(try await store.dueToAsk(store: .appstore, deadline: 86_400, now: now, after: nil, limit: 10).isEmpty)
    }

    @Test(arguments: repositories) func hostileStringsAreStoredVerbatim(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let user: UserID = "'; DROP TABLE purchases; -- ünï 🪙"
        let record = purchase("x'); DELETE FROM ledger; --", user: user, product: "coins.100\" OR 1=1")
        #expect(try await store.recordVerified(record, at: Self.t0) == .recorded)
        #expect(try await store.purchase(record.key) == record)
    }
}

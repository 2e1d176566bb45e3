import Database
import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// In memory and on both engines: an entitlement is held while any purchase that gives it is in force, until the latest
/// of their expiries; taking back or ending one purchase takes only what that purchase gave. (schemas/examples/catalog.json
/// gives "pass" from both `pass.season`, 90 days, and `pass.monthly`, a subscription.)
@Suite struct EntitlementStoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)
    static func day(_ n: Double) -> Date { t0.addingTimeInterval(n * 86_400) }

    /// A purchase of `product` by `user`, recorded and granted "pass" until `until` at `at`.
    @discardableResult
    func grantPass(_ store: any TestedRepository, _ id: TransactionID, user: UserID = "user-e", product: ProductID, type: ProductType, original: TransactionID? = nil,
                   entitlement: ItemCode = "pass", until: Date?, at time: Date) async throws -> PurchaseKey {
        let key = try await record(store, id, user: user, product: product, type: type, original: original, at: time)
        guard case .granted = try await store.grant(key, items: [.entitlement(entitlement, until: until)], at: time) else {
            Issue.record("\(id) not granted")
            return key
        }
        return key
    }

    /// A purchase of `product` by `user` at `time`, recorded as the verifier records it (at `recordedAt`, default `time`).
    func record(_ store: any TestedRepository, _ id: TransactionID, user: UserID, product: ProductID, type: ProductType, original: TransactionID?, at time: Date,
                recordedAt: Date? = nil) async throws -> PurchaseKey {
        let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: product, productType: type,
                                    quantity: 1, purchaseTime: time, originalTransactionId: original)
        #expect(try await store.recordVerified(record, at: recordedAt ?? time) == .recorded)
        return record.key
    }

    /// Season pass (90 days), then a monthly subscription (31 days), the monthly refunded on day 2: the season pass,
    /// still paid for, stays, until day 90 (the monthly's grant did not shorten it, nor did its refund end it).
    @Test(arguments: RepositoryKind.available) func aRefundOfOnePurchaseLeavesTheEntitlementAnotherGives(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        try await grantPass(store, "season-1", product: "pass.season", type: .nonRenewing, until: Self.day(90), at: Self.day(0))
        let monthly = try await grantPass(store, "monthly-1", product: "pass.monthly", type: .autoRenewable, original: "monthly-1",
                                          until: Self.day(32), at: Self.day(1))
        #expect(try await store.entitlements(of: "user-e", at: Self.day(2)) == ["pass": Self.day(90)], "the latest expiry of the two")
        #expect(try await store.revoke(monthly, at: Self.day(2)) == .revoked(shortfall: [:]))
        #expect(try await store.entitlements(of: "user-e", at: Self.day(2)) == ["pass": Self.day(90)], "the season pass is still paid for")
        #expect(try await store.holdings(of: "user-e", at: Self.day(2)).entitlements
                == [UserHoldings.Entitlement(entitlement: "pass", productId: "pass.season", expiresAt: Self.day(90))])
        #expect(try await store.entitlements(of: "user-e", at: Self.day(91)).isEmpty, "and ends with it")
    }

    /// A renewal's grant arriving after the next one's (partitions, retries) does not shorten the subscription; refunding
    /// the later period leaves the earlier one's.
    @Test(arguments: RepositoryKind.available) func aLateGrantOfAnOlderRenewalDoesNotShortenTheEntitlement(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let later = try await grantPass(store, "sub-2", product: "pass.monthly", type: .autoRenewable, original: "sub-1", until: Self.day(60), at: Self.day(30))
        try await grantPass(store, "sub-1", product: "pass.monthly", type: .autoRenewable, original: "sub-1", until: Self.day(30), at: Self.day(0))
        #expect(try await store.entitlements(of: "user-e", at: Self.day(10)) == ["pass": Self.day(60)])
        #expect(try await store.revoke(later, at: Self.day(10)) == .revoked(shortfall: [:]))
        #expect(try await store.entitlements(of: "user-e", at: Self.day(10)) == ["pass": Self.day(30)], "the first period is still paid for")
    }

    /// A permanent grant outlasts any expiry; a restore under another user moves only the purchase restored.
    @Test(arguments: RepositoryKind.available) func aPurchaseForGoodOutlastsExpiriesAndMovesAlone(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let forGood = try await grantPass(store, "life-1", product: "pass.lifetime", type: .nonConsumable, until: nil, at: Self.day(0))
        try await grantPass(store, "season-2", product: "pass.season", type: .nonRenewing, until: Self.day(90), at: Self.day(1))
        #expect(try await store.entitlements(of: "user-e", at: Self.day(2)) == ["pass": nil])
        #expect(try await store.transfer(forGood, to: "user-f", policy: .transfer, at: Self.day(2)) == .transferred(from: "user-e", items: [.entitlement("pass")]))
        #expect(try await store.entitlements(of: "user-f", at: Self.day(2)) == ["pass": nil])
        #expect(try await store.entitlements(of: "user-e", at: Self.day(2)) == ["pass": Self.day(90)], "the season pass stays with its buyer")
    }

    /// Migration 10: entitlements kept one row per user and entitlement, the last grant's. Each row stays as it was
    /// (ended ones ended), and what a purchase still in force gives, by its ledger, but a later grant overwrote comes back.
    @Test(arguments: StoreEngine.available) func aStoreOfOneRowPerEntitlementMigrates(_ engine: StoreEngine) async throws {
        let store = try SQLPurchaseStore(url: try await engine.freshURL())
        #expect(try await store.migrate(through: 9) == Array(1...9))
        let at = PurchaseTime.milliseconds(Self.t0)
        @Sendable func ms(_ date: Date) -> SQLValue { .integer(PurchaseTime.milliseconds(date)) }
        try await store.executor.run { connection in
            // (id, user, product, type, state, expiry of its grant, revoked)
            let purchases: [(String, String, String, String, String, Date?, Bool)] = [
                ("season-1", "user-m", "pass.season", "nonRenewing", "finished", Self.day(90), false),
                ("monthly-1", "user-m", "pass.monthly", "autoRenewable", "finished", Self.day(32), false),
                ("ended-1", "user-n", "pass.monthly", "autoRenewable", "finished", Self.day(30), false),
                ("refunded-1", "user-o", "pass.season", "nonRenewing", "revoked", Self.day(90), true),
            ]
            for (id, user, product, type, state, expiry, revoked) in purchases {
                try connection.query("""
                    INSERT INTO purchases (store, transaction_id, original_transaction_id, user_id, product_id, product_type, quantity, purchase_time, state)
                    VALUES ('appstore', $1, $1, $2, $3, $4, 1, $5, $6)
                    """, [.text(id), .text(user), .text(product), .text(type), .integer(at), .text(state)])
                try connection.query("""
                    INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, expires_at, created_at)
                    VALUES ('appstore', $1, 'grant', $2, 'entitlement', 'pass', 1, $3, $4)
                    """, [.text(id), .text(user), expiry.map(ms) ?? .null, .integer(at)])
                if revoked {
                    try connection.query("""
                        INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, created_at)
                        VALUES ('appstore', $1, 'revoke', $2, 'entitlement', 'pass', -1, $3)
                        """, [.text(id), .text(user), .integer(at)])
                }
            }
            // The monthly's grant overwrote the season pass's row; user-n's subscription was ended early (EXPIRED).
            try connection.query("""
                INSERT INTO entitlements (user_id, entitlement, store, transaction_id, expires_at, active)
                VALUES ('user-m', 'pass', 'appstore', 'monthly-1', $1, 1), ('user-n', 'pass', 'appstore', 'ended-1', $2, 0),
                       ('user-o', 'pass', 'appstore', 'refunded-1', $3, 0)
                """, [ms(Self.day(32)), ms(Self.day(5)), ms(Self.day(90))])
        }
        #expect(try await store.migrate() == Array(10...latestSchemaVersion))
        #expect(try await store.entitlements(of: "user-m", at: Self.day(2)) == ["pass": Self.day(90)], "the season pass the monthly's row hid")
        #expect(try await store.revoke(PurchaseKey(store: .appstore, transactionId: "monthly-1"), at: Self.day(2)) == .revoked(shortfall: [:]))
        #expect(try await store.entitlements(of: "user-m", at: Self.day(2)) == ["pass": Self.day(90)])
        #expect(try await store.entitlements(of: "user-n", at: Self.day(2)).isEmpty, "ended stays ended")
        #expect(try await store.entitlements(of: "user-o", at: Self.day(2)).isEmpty, "refunded stays refunded")
    }

    /// RENEWAL_EXTENDED: a monthly period granted until day 31, extended to day 45, is held until then; extended to day 50
    /// by a notification that arrives after a refund, its reversal gives it back until day 50, and a restore by another user
    /// moves it so. An older copy of the period changes
    /// nothing, nor does an extension of a period that ended, or of a pass that is not a subscription.
    @Test(arguments: RepositoryKind.available) func aRenewalExtensionMovesThePeriodsExpiryForward(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "ext-1"), userId: "user-x", productId: "pass.monthly",
                                    productType: .autoRenewable, quantity: 1, purchaseTime: Self.day(0), originalTransactionId: "ext-1", expiresDate: Self.day(31))
        #expect(try await store.recordVerified(record, at: Self.day(0)) == .recorded)
        _ = try await store.grant(record.key, items: [.entitlement("pass", until: Self.day(31))], at: Self.day(0))
        #expect(try await store.extendSubscription(record.key, to: Self.day(45), at: Self.day(20)) == .extended(entitlements: ["pass"], until: Self.day(45)))
        #expect(try await store.entitlements(of: "user-x", at: Self.day(40)) == ["pass": Self.day(45)])
        #expect(try await store.purchase(record.key)?.expiresDate == Self.day(45))
        #expect(try await store.extendSubscription(record.key, to: Self.day(31), at: Self.day(21)) == .unchanged(state: .granted), "an older copy")
        #expect(try await store.extendSubscription(record.key, to: Self.day(45), at: Self.day(21)) == .extended(entitlements: ["pass"], until: Self.day(45)),
                "a repeat (a redelivery) answers the same")
        #expect(try await store.entitlements(of: "user-x", at: Self.day(40)) == ["pass": Self.day(45)])
        guard case .alreadyGranted(let items, _, _) = try await store.grant(record.key, items: [.entitlement("pass", until: Self.day(31))], at: Self.day(21)) else {
            Issue.record("not a repeat"); return
        }
        #expect(items.map(\.expiresAt) == [Self.day(45)], "a repeat of the grant answers the period as extended")

        // A second extension, decided before a refund but arriving after it: kept for the refund's reversal.
        _ = try await store.revoke(record.key, at: Self.day(22))
        #expect(try await store.extendSubscription(record.key, to: Self.day(50), at: Self.day(22)) == .unchanged(state: .revoked))
        #expect(try await store.entitlements(of: "user-x", at: Self.day(40)).isEmpty)
        guard case .reinstated = try await store.reinstate(record.key, items: [], at: Self.day(23)) else { Issue.record("not reinstated"); return }
        #expect(try await store.entitlements(of: "user-x", at: Self.day(40)) == ["pass": Self.day(50)], "the reversal gives back the extended period")
        #expect(try await store.transfer(record.key, to: "user-y", policy: .transfer, at: Self.day(24)) != .alreadyOwned)
        #expect(try await store.entitlements(of: "user-y", at: Self.day(40)) == ["pass": Self.day(50)], "the restore moves the extended period")

        #expect(try await store.expireSubscription(record.key, at: Self.day(30)) == .ended(entitlements: ["pass"]))
        #expect(try await store.extendSubscription(record.key, to: Self.day(60), at: Self.day(31)) == .unchanged(state: .finished), "an ended period")
        #expect(try await store.entitlements(of: "user-y", at: Self.day(31)).isEmpty)
        let season = try await grantPass(store, "season-x", user: "user-x", product: "pass.season", type: .nonRenewing, until: Self.day(90), at: Self.day(0))
        #expect(try await store.extendSubscription(season, to: Self.day(120), at: Self.day(1)) == .unchanged(state: .granted), "not a subscription period")
    }

    /// An upgrade (gold from day 10, in the subscription silver began) takes effect at once: silver ends on day 10, not
    /// on day 31, and stays ended when its grant is repeated, its renewal date extended, its refund reversed, and when it
    /// is restored to another user before gold is. A renewal of gold, even one that begins early, ends nothing.
    @Test(arguments: RepositoryKind.available) func anUpgradeEndsThePeriodItReplacesAtItsStart(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let silver = try await grantPass(store, "up-1", user: "user-u", product: "vip.silver", type: .autoRenewable, original: "up-1",
                                         entitlement: "silver", until: Self.day(31), at: Self.day(0))
        #expect(try await store.entitlements(of: "user-u", at: Self.day(5)) == ["silver": Self.day(31)])
        let gold = try await grantPass(store, "up-2", user: "user-u", product: "vip.gold", type: .autoRenewable, original: "up-1",
                                       entitlement: "gold", until: Self.day(41), at: Self.day(10))
        #expect(try await store.entitlements(of: "user-u", at: Self.day(5)) == ["silver": Self.day(10), "gold": Self.day(41)])
        #expect(try await store.entitlements(of: "user-u", at: Self.day(11)) == ["gold": Self.day(41)], "silver ended at the upgrade")
        // (Granted to another user, so that user-u's gold is up-2's alone.)
        try await grantPass(store, "up-3", user: "user-w", product: "vip.gold", type: .autoRenewable, original: "up-1",
                            entitlement: "gold", until: Self.day(72), at: Self.day(35))
        #expect(try await store.grantedItems(gold).map(\.expiresAt) == [Self.day(41)], "a renewal ends nothing")
        #expect(try await store.entitlements(of: "user-u", at: Self.day(36)) == ["gold": Self.day(41)], "a renewal ends nothing")

        guard case .alreadyGranted(let items, _, _) = try await store.grant(silver, items: [.entitlement("silver", until: Self.day(31))], at: Self.day(12)) else {
            Issue.record("not a repeat"); return
        }
        #expect(items.map(\.expiresAt) == [Self.day(10)], "a repeat answers the period as it ended")
        #expect(try await store.extendSubscription(silver, to: Self.day(50), at: Self.day(12)) == .unchanged(state: .granted),
                "an extension does not outlast the upgrade")
        #expect(try await store.revoke(silver, at: Self.day(12)) == .revoked(shortfall: [:]))
        guard case .reinstated = try await store.reinstate(silver, items: [], at: Self.day(13)) else { Issue.record("not reinstated"); return }
        #expect(try await store.entitlements(of: "user-u", at: Self.day(11)) == ["gold": Self.day(41)], "the reversal gives silver back as it ended")
        #expect(try await store.transfer(silver, to: "user-v", policy: .transfer, at: Self.day(14)) == .transferred(from: "user-u", items: [.entitlement("silver", until: Self.day(10))]))
        #expect(try await store.entitlements(of: "user-v", at: Self.day(11)).isEmpty, "restored as it ended, gold still with its buyer")
    }

    /// An upgrade answers the periods it ended, each with who holds it (silver was restored to another user): what each
    /// gave, ending at the upgrade's start. A repeat and a renewal of the same product end nothing more.
    @Test(arguments: RepositoryKind.available) func anUpgradeAnswersThePeriodsItEndedWithTheirHolders(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let silver = try await grantPass(store, "ah-1", user: "user-a", product: "vip.silver", type: .autoRenewable, original: "ah-1",
                                         entitlement: "silver", until: Self.day(31), at: Self.day(0))
        guard case .transferred = try await store.transfer(silver, to: "user-b", policy: .transfer, at: Self.day(2)) else { Issue.record("not restored"); return }
        let gold = try await record(store, "ah-2", user: "user-a", product: "vip.gold", type: .autoRenewable, original: "ah-1", at: Self.day(10))
        let goldItems: [GrantItem] = [.entitlement("gold", until: Self.day(41))]
        guard case .granted(_, _, let endsBy, let ended) = try await store.grant(gold, items: goldItems, at: Self.day(10)) else {
            Issue.record("not granted"); return
        }
        #expect(endsBy == nil)
        #expect(ended == [EndedPeriod(key: silver, userId: "user-b", productId: "vip.silver", quantity: 1, endedAt: Self.day(10),
                                      items: [.entitlement("silver", until: Self.day(10))])])
        guard case .alreadyGranted(_, _, let endedAgain) = try await store.grant(gold, items: goldItems, at: Self.day(11)) else {
            Issue.record("not a repeat"); return
        }
        #expect(endedAgain == ended, "a repeat answers them again, for answers that were lost")
        let renewal = try await record(store, "ah-3", user: "user-a", product: "vip.gold", type: .autoRenewable, original: "ah-1", at: Self.day(41))
        guard case .granted(_, _, _, let endedByRenewal) = try await store.grant(renewal, items: [.entitlement("gold", until: Self.day(72))], at: Self.day(41)) else {
            Issue.record("renewal not granted"); return
        }
        #expect(endedByRenewal.isEmpty, "a renewal ends nothing")

        // Gold from the day silver's period ends: not an upgrade, nothing ended, now or in its repeats.
        try await grantPass(store, "nx-1", user: "user-x", product: "vip.silver", type: .autoRenewable, original: "nx-1",
                            entitlement: "silver", until: Self.day(10), at: Self.day(0))
        let next = try await record(store, "nx-2", user: "user-x", product: "vip.gold", type: .autoRenewable, original: "nx-1", at: Self.day(10))
        for day in [10.0, 11] {
            switch try await store.grant(next, items: [.entitlement("gold", until: Self.day(41))], at: Self.day(day)) {
            case .granted(_, _, _, let none), .alreadyGranted(_, _, let none): #expect(none.isEmpty, "day \(day)")
            case let outcome: Issue.record("\(outcome)")
            }
        }
    }

    /// The replaced period's grant arriving after the upgrade's (partitions, retries) ends at the upgrade too, and says so.
    @Test(arguments: RepositoryKind.available) func aReplacedPeriodGrantedLateEndsAtTheUpgrade(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        try await grantPass(store, "late-2", user: "user-l", product: "vip.gold", type: .autoRenewable, original: "late-1",
                            entitlement: "gold", until: Self.day(41), at: Self.day(10))
        let silver = try await record(store, "late-1", user: "user-l", product: "vip.silver", type: .autoRenewable, original: "late-1", at: Self.day(0),
                                      recordedAt: Self.day(11))
        guard case .granted(_, _, let endsBy, _) = try await store.grant(silver, items: [.entitlement("silver", until: Self.day(31))], at: Self.day(11)) else {
            Issue.record("not granted"); return
        }
        #expect(endsBy == Self.day(10))
        #expect(try await store.entitlements(of: "user-l", at: Self.day(5)) == ["silver": Self.day(10), "gold": Self.day(41)])
    }

    /// An upgrade refunded before its grant and then reinstated ends the period it replaced when it is given back.
    @Test(arguments: RepositoryKind.available) func aReinstatedUpgradeEndsThePeriodItReplaced(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        try await grantPass(store, "rv-1", user: "user-r", product: "vip.silver", type: .autoRenewable, original: "rv-1",
                            entitlement: "silver", until: Self.day(31), at: Self.day(0))
        let gold = try await record(store, "rv-2", user: "user-r", product: "vip.gold", type: .autoRenewable, original: "rv-1", at: Self.day(10))
        _ = try await store.revoke(gold, at: Self.day(11))
        guard case .reinstated = try await store.reinstate(gold, items: [.entitlement("gold", until: Self.day(41))], at: Self.day(12)) else {
            Issue.record("not reinstated"); return
        }
        #expect(try await store.entitlements(of: "user-r", at: Self.day(11)) == ["gold": Self.day(41)])
    }

    /// A renewal-date extension of a period that arrives after another product of the subscription began extends it only
    /// to that start, and says so.
    @Test(arguments: RepositoryKind.available) func anExtensionEndsAtTheStartOfTheNextProduct(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let silver = try await grantPass(store, "ex-1", user: "user-n", product: "vip.silver", type: .autoRenewable, original: "ex-1",
                                         entitlement: "silver", until: Self.day(8), at: Self.day(0))
        try await grantPass(store, "ex-2", user: "user-n", product: "vip.gold", type: .autoRenewable, original: "ex-1",
                            entitlement: "gold", until: Self.day(41), at: Self.day(10))
        #expect(try await store.extendSubscription(silver, to: Self.day(50), at: Self.day(12)) == .extended(entitlements: ["silver"], until: Self.day(10)))
        #expect(try await store.entitlements(of: "user-n", at: Self.day(9)) == ["silver": Self.day(10), "gold": Self.day(41)])
    }
}

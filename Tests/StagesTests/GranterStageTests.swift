import Foundation
import InMemoryPurchaseStore
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import Testing
import WorkerRuntime

/// The granter's answers to the store's later decisions (`purchase.revoked`) and to upgrades, message by message on the
/// in-memory repository (which the repository contract tests hold to the SQL store's semantics), at times the test sets.
@Suite struct GranterStageTests {
    static let codec = StageFixtures.codec
    static let catalog = StageFixtures.catalog
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)
    static func day(_ n: Double) -> Date { t0.addingTimeInterval(n * 86_400) }

    /// What the granter answers `event` with at `now`.
    @discardableResult
    func handle(_ event: some PipelineEvent, _ store: InMemoryPurchaseStore, at now: Date, catalog: ProductCatalog = Self.catalog) async throws -> StageResult {
        try await Self.granter(store, at: now, catalog: catalog).handle(try StageFixtures.message(event, at: now))
    }

    /// A granter deciding on `store` at `now`.
    static func granter(_ store: InMemoryPurchaseStore, at now: Date, catalog: ProductCatalog = catalog, clawBack: Bool = false) -> GranterStage {
        GranterStage(context: StageContext(codec: codec, logger: Logger(stage: "t", minimum: .error), now: { now }), store: store, catalog: catalog,
                     clawBackDueRefunds: clawBack)
    }

    /// A period of the monthly pass of subscription `original`, recorded as the verifier records it and granted.
    func subscribe(_ id: TransactionID, original: TransactionID, user: UserID, from: Date, until: Date, _ store: InMemoryPurchaseStore) async throws {
        let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: "pass.monthly",
                                    productType: .autoRenewable, quantity: 1, purchaseTime: from, originalTransactionId: original)
        #expect(try await store.recordVerified(record, at: from) == .recorded)
        try await handle(PurchaseVerifiedEvent(store: .appstore, transactionId: id, originalTransactionId: original, productId: "pass.monthly",
                                               productType: ProductType.autoRenewable.rawValue, quantity: 1, userId: user, purchaseDate: from,
                                               expiresDate: until, source: .client, verifiedAt: from), store, at: from)
    }

    func expired(_ id: TransactionID, original: TransactionID, _ reason: PurchaseRevokedEvent.Reason = .EXPIRED, at now: Date) -> PurchaseRevokedEvent {
        PurchaseRevokedEvent(store: .appstore, transactionId: id, originalTransactionId: original, productId: "pass.monthly", reason: reason,
                             notificationUUID: UUID().uuidString, revokedAt: now)
    }

    /// The first period ends on day 30, the user subscribes again (paid to day 65), and the first period's EXPIRED arrives
    /// late, on day 36: it ends what the first period gave, not the newer period. The newer period's own expiry ends it.
    @Test func aLateExpiryOfAnEarlierPeriodLeavesTheNewerPeriodPaidFor() async throws {
        let store = InMemoryPurchaseStore()
        try await subscribe("sub-1", original: "sub-1", user: "user-g", from: Self.day(0), until: Self.day(30), store)
        try await subscribe("sub-2", original: "sub-1", user: "user-g", from: Self.day(30), until: Self.day(65), store)
        #expect(try await store.entitlements(of: "user-g", at: Self.day(36)) == ["pass": Self.day(65)])
        try await handle(expired("sub-1", original: "sub-1", at: Self.day(36)), store, at: Self.day(36))
        #expect(try await store.entitlements(of: "user-g", at: Self.day(36)) == ["pass": Self.day(65)], "paid to day 65")
        try await handle(expired("sub-2", original: "sub-1", .GRACE_PERIOD_EXPIRED, at: Self.day(40)), store, at: Self.day(40))
        #expect(try await store.entitlements(of: "user-g", at: Self.day(40)).isEmpty, "the period it names ends now")
    }

    /// An upgrade's period (gold, from day 10) granted before the period it replaced (silver, paid to day 31; partitions,
    /// retries): silver's `item.granted` says it ends at the upgrade, as the store holds it.
    @Test func aReplacedPeriodGrantedAfterItsUpgradeIsAnnouncedEndingThen() async throws {
        let store = InMemoryPurchaseStore()
        let answer = try await grantTiers([("vip-2", "vip.gold", Self.day(10), Self.day(41)), ("vip-1", "vip.silver", Self.day(0), Self.day(31))], store,
                                          at: Self.day(11))
        #expect(itemGranted(answer)?.items == [GrantedItem(kind: .entitlement, code: "silver", expiresAt: Self.day(10))])
        #expect(try await store.entitlements(of: "user-v", at: Self.day(5)) == ["silver": Self.day(10), "gold": Self.day(41)])
    }

    /// Gold granted on day 10 while silver, paid to day 31, is held: besides gold's own `item.granted`, silver's holder is
    /// told that silver ends at day 10 (`alreadyGranted`, an event of its own by `ce_id`).
    @Test func anUpgradeAnnouncesThePeriodItEnded() async throws {
        let store = InMemoryPurchaseStore()
        let answer = try await grantTiers([("vip-1", "vip.silver", Self.day(0), Self.day(31)), ("vip-2", "vip.gold", Self.day(10), Self.day(41))], store)
        guard case .publish(let out)? = answer, out.count == 2, let value = out.last?.value,
              case .success(let ended) = Self.codec.decodeBody(value, as: ItemGranted.self) else { Issue.record("\(String(describing: answer))"); return }
        #expect(itemGranted(answer)?.items == [GrantedItem(kind: .entitlement, code: "gold", expiresAt: Self.day(41))])
        #expect((ended.transactionId, ended.userId, ended.productId) == ("vip-1", "user-v", "vip.silver"))
        #expect(ended.alreadyGranted && ended.items == [GrantedItem(kind: .entitlement, code: "silver", expiresAt: Self.day(10))])
        #expect(out.last?.headers.first { $0.key == "ce_id" }?.value.map { String(decoding: $0, as: UTF8.self) }
                == "ended:appstore:vip-1:\(Int64(Self.day(10).timeIntervalSince1970 * 1000))")
        // Gold signed again with a later expiry (RENEWAL_EXTENDED), perhaps a redelivery after its answers were lost: silver's
        // end is told again beside the extension.
        let extended = try await handle(tierPeriod("vip-2", "vip.gold", from: Self.day(10), until: Self.day(50)), store, at: Self.day(12), catalog: Self.tiers)
        guard case .publish(let again) = extended, again.count == 2, let last = again.last?.value,
              case .success(let endedAgain) = Self.codec.decodeBody(last, as: ItemGranted.self) else { Issue.record("\(extended)"); return }
        #expect(itemGranted(extended)?.items == [GrantedItem(kind: .entitlement, code: "gold", expiresAt: Self.day(50))])
        #expect(endedAgain.transactionId == "vip-1" && endedAgain.items == ended.items)
    }

    /// Silver and gold granted in one batch (the app submitting both on launch): gold's answer names silver's entitlement
    /// ending at gold's start, although silver's ledger entries were still waiting for the batch's end.
    @Test func anUpgradeGrantedInTheBatchOfThePeriodItEndsAnnouncesIt() async throws {
        let store = InMemoryPurchaseStore()
        var messages: [KafkaMessage] = []
        let periods: [(TransactionID, ProductID, Date, Date)] = [("vip-1", "vip.silver", Self.day(0), Self.day(31)), ("vip-2", "vip.gold", Self.day(10), Self.day(41))]
        for (offset, (id, product, from, until)) in periods.enumerated() {
            #expect(try await store.recordVerified(PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: "user-v", productId: product,
                                                                  productType: .autoRenewable, quantity: 1, purchaseTime: from, originalTransactionId: "vip-1"),
                                                   at: Self.day(11)) == .recorded)
            messages.append(try StageFixtures.message(tierPeriod(id, product, from: from, until: until), offset: Int64(offset), at: Self.day(11)))
        }
        let results = await Self.granter(store, at: Self.day(11), catalog: Self.tiers).handle(batch: messages)
        guard results.count == 2, case .success(.publish(let out)) = results[1], out.count == 2, let value = out.last?.value,
              case .success(let ended) = Self.codec.decodeBody(value, as: ItemGranted.self) else { Issue.record("\(results)"); return }
        #expect((ended.transactionId, ended.userId) == ("vip-1", "user-v"))
        #expect(ended.items == [GrantedItem(kind: .entitlement, code: "silver", expiresAt: Self.day(10))])
    }

    /// Silver, paid to day 8, signed again with a later expiry (RENEWAL_EXTENDED) after gold began on day 10: extended
    /// only to gold's start, and announced so.
    @Test func anExtensionPastTheNextProductIsAnnouncedEndingAtIt() async throws {
        let store = InMemoryPurchaseStore()
        try await grantTiers([("vip-1", "vip.silver", Self.day(0), Self.day(8)), ("vip-2", "vip.gold", Self.day(10), Self.day(41))], store)
        let extended = itemGranted(try await handle(tierPeriod("vip-1", "vip.silver", from: Self.day(0), until: Self.day(50)), store, at: Self.day(12),
                                                    catalog: Self.tiers))
        #expect(extended?.items == [GrantedItem(kind: .entitlement, code: "silver", expiresAt: Self.day(10))])
    }

    /// Two tiers of one subscription.
    static let tiers = try! ProductCatalog(json: Data(#"""
        {"appstore": {"vip.silver": {"type": "autoRenewable", "entitlement": "silver"}, "vip.gold": {"type": "autoRenewable", "entitlement": "gold"}}}
        """#.utf8), schemas: StageFixtures.schemas)

    /// Periods (id, product, start, expiry) of subscription vip-1 of user-v, each recorded as the verifier records it and
    /// granted, at `time` (default: at its start); the last one's answer.
    @discardableResult
    func grantTiers(_ periods: [(TransactionID, ProductID, Date, Date)], _ store: InMemoryPurchaseStore, at time: Date? = nil) async throws -> StageResult? {
        var answer: StageResult?
        for (id, product, from, until) in periods {
            #expect(try await store.recordVerified(PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: "user-v", productId: product,
                                                                  productType: .autoRenewable, quantity: 1, purchaseTime: from, originalTransactionId: "vip-1"),
                                                   at: time ?? from) == .recorded)
            answer = try await handle(tierPeriod(id, product, from: from, until: until), store, at: time ?? from, catalog: Self.tiers)
        }
        return answer
    }

    func tierPeriod(_ id: TransactionID, _ product: ProductID, from: Date, until: Date) -> PurchaseVerifiedEvent {
        PurchaseVerifiedEvent(store: .appstore, transactionId: id, originalTransactionId: "vip-1", productId: product,
                              productType: ProductType.autoRenewable.rawValue, quantity: 1, userId: "user-v", purchaseDate: from,
                              expiresDate: until, source: .client, verifiedAt: Self.day(11))
    }

    /// The `item.granted` a stage answered with, if it published one first.
    func itemGranted(_ answer: StageResult?) -> ItemGranted? {
        guard case .publish(let out)? = answer, let value = out.first?.value, case .success(let granted) = Self.codec.decodeBody(value, as: ItemGranted.self) else {
            return nil
        }
        return granted
    }

    /// 100 coins granted, 70 spent in the game, then a refund (it takes the 30 left) and its reversal: `item.granted`
    /// (`reinstated`) gives back the 30 the refund took, and the balance is what it was before the refund.
    @Test func aReversedRefundAnnouncesWhatTheRefundTook() async throws {
        let store = InMemoryPurchaseStore()
        _ = try await store.recordVerified(PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "coins-1"), userId: "user-c", productId: "coins.100",
                                                          productType: .consumable, quantity: 1, purchaseTime: Self.t0), at: Self.t0)
        try await handle(PurchaseVerifiedEvent(store: .appstore, transactionId: "coins-1", productId: "coins.100", quantity: 1, userId: "user-c",
                                               purchaseDate: Self.t0, source: .client, verifiedAt: Self.t0), store, at: Self.t0)
        try await store.setBalance(of: "user-c", "coins", to: 30) // 70 spent in the game
        try await handle(PurchaseRevokedEvent(store: .appstore, transactionId: "coins-1", reason: .REFUND, revokedAt: Self.day(1)), store, at: Self.day(1))
        #expect(try await store.balances(of: "user-c") == ["coins": 0])
        guard case .publish(let out) = try await handle(PurchaseRevokedEvent(store: .appstore, transactionId: "coins-1", reason: .REFUND_REVERSED,
                                                                             revokedAt: Self.day(2)), store, at: Self.day(2)),
              let value = out.first?.value, case .success(let granted) = Self.codec.decodeBody(value, as: ItemGranted.self) else {
            Issue.record("no item.granted"); return
        }
        #expect(granted.reinstated == true)
        #expect(granted.items == [GrantedItem(kind: .currency, code: "coins", amount: 30, balance: 30)], "\(granted.items)")
        #expect(try await store.balances(of: "user-c") == ["coins": 30])
    }

    /// A refund and its reversal are carried out in the order the store decided them (their notifications' `signedDate`,
    /// `decidedAt`), not the order they arrive in: the reversal first leaves the purchase granted and its refund, arriving
    /// after, changes nothing; a refund arriving again after its reversal changes nothing either; a refund decided later
    /// still takes the coins back. The same for a purchase not seen yet: its refund's reversal first, and it is granted.
    @Test func aRefundAndItsReversalAreCarriedOutInTheOrderTheStoreDecidedThem() async throws {
        let store = InMemoryPurchaseStore()
        func purchase(_ id: TransactionID) async throws -> PurchaseKey {
            let key = PurchaseKey(store: .appstore, transactionId: id)
            _ = try await store.recordVerified(PurchaseRecord(key: key, userId: "user-o", productId: "coins.100", productType: .consumable, quantity: 1,
                                                              purchaseTime: Self.t0), at: Self.t0)
            try await handle(PurchaseVerifiedEvent(store: .appstore, transactionId: id, productId: "coins.100", quantity: 1, userId: "user-o",
                                                   purchaseDate: Self.t0, source: .client, verifiedAt: Self.t0), store, at: Self.t0)
            return key
        }
        func decision(_ key: PurchaseKey, _ reason: PurchaseRevokedEvent.Reason, decidedOn day: Double, arrivingOn arrival: Double) async throws {
            try await handle(PurchaseRevokedEvent(store: .appstore, transactionId: key.transactionId, reason: reason, decidedAt: Self.day(day),
                                                  revokedAt: Self.day(arrival)), store, at: Self.day(arrival))
        }
        let reversedFirst = try await purchase("order-1")
        try await decision(reversedFirst, .REFUND_REVERSED, decidedOn: 2, arrivingOn: 2)
        try await decision(reversedFirst, .REFUND, decidedOn: 1, arrivingOn: 3)
        #expect(try await store.purchase(reversedFirst)?.state == .granted, "the refund was reversed: the user keeps the coins")
        #expect(try await store.balances(of: "user-o") == ["coins": 100])

        let refundedAgain = try await purchase("order-2")
        try await decision(refundedAgain, .REFUND, decidedOn: 1, arrivingOn: 1)
        try await decision(refundedAgain, .REFUND_REVERSED, decidedOn: 2, arrivingOn: 2)
        try await decision(refundedAgain, .REFUND, decidedOn: 1, arrivingOn: 3)
        #expect(try await store.purchase(refundedAgain)?.state == .finished, "the refund arriving again after its reversal")
        #expect(try await store.balances(of: "user-o") == ["coins": 200])
        try await decision(refundedAgain, .REFUND, decidedOn: 4, arrivingOn: 4)
        #expect(try await store.purchase(refundedAgain)?.state == .revoked, "refunded again, later")
        #expect(try await store.balances(of: "user-o") == ["coins": 100])

        let unseen = PurchaseKey(store: .appstore, transactionId: "order-3")
        try await decision(unseen, .REFUND_REVERSED, decidedOn: 2, arrivingOn: 2)
        try await decision(unseen, .REFUND, decidedOn: 1, arrivingOn: 3)
        _ = try await purchase(unseen.transactionId)
        #expect(try await store.purchase(unseen)?.state == .granted, "its refund was reversed before it was seen")
        #expect(try await store.balances(of: "user-o") == ["coins": 200])

        // A transaction signed while it was refunded (revocationDate) reaching the granter after the reversal: granted.
        let stale = PurchaseKey(store: .appstore, transactionId: "order-4")
        _ = try await store.recordVerified(PurchaseRecord(key: stale, userId: "user-o", productId: "coins.100", productType: .consumable, quantity: 1,
                                                          purchaseTime: Self.t0), at: Self.t0)
        try await decision(stale, .REFUND_REVERSED, decidedOn: 2, arrivingOn: 2)
        try await handle(PurchaseVerifiedEvent(store: .appstore, transactionId: stale.transactionId, productId: "coins.100", quantity: 1, userId: "user-o",
                                               purchaseDate: Self.t0, revocationDate: Self.day(1), source: .client, verifiedAt: Self.day(3)), store, at: Self.day(3))
        #expect(try await store.purchase(stale)?.state == .granted, "its refund, signed in the transaction, was reversed since")
        #expect(try await store.balances(of: "user-o") == ["coins": 300])
    }

    /// A product the catalog does not know is refused (`purchase.rejected`) and kept for the user's history, once however
    /// often its message comes.
    @Test func aRefusedGrantIsKeptForTheUsersHistoryOnce() async throws {
        let store = InMemoryPurchaseStore()
        let verified = PurchaseVerifiedEvent(store: .appstore, transactionId: "order-x", productId: "no.such.product", quantity: 1, userId: "user-x",
                                             purchaseDate: Self.t0, source: .client, verifiedAt: Self.t0)
        for day in [1.0, 2] {
            guard case .publish(let messages) = try await handle(verified, store, at: Self.day(day)) else { Issue.record("not answered"); return }
            #expect(messages.map(\.topic) == [Self.codec.topic(.purchaseRejected)])
        }
        #expect(try await store.rejections(of: "user-x") == [RejectionRecord(causeID: verified.eventID, userId: "user-x", store: .appstore, transactionId: "order-x",
                                                                          productId: "no.such.product", reason: "unknownProduct", rejectedAt: Self.day(1))])
    }
}

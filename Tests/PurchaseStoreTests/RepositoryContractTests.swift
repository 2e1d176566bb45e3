import Foundation
import InMemoryPurchaseStore
import PurchaseDomain
import TestData
import Testing

/// What every repository answers, in memory and on both engines, beyond the store suites run on all three: what the
/// lifecycle refuses, refund decisions in the order the store made them, batches, byte identity, and the reads the stages
/// decide with.
@Suite struct RepositoryContractTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_700_000)

    func purchase(_ id: TransactionID, user: UserID = "user-1", product: ProductID = "coins.100", type: ProductType = .consumable,
                  original: TransactionID? = nil, environment: String? = nil, at time: Date = t0) -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: product, productType: type, quantity: 1,
                       purchaseTime: time, environment: environment, originalTransactionId: original)
    }

    /// Records `record` and grants it 100 coins.
    func granted(_ record: PurchaseRecord, in store: any TestedRepository) async throws {
        #expect(try await store.recordVerified(record, at: Self.t0) == .recorded)
        guard case .granted = try await store.grant(record.key, items: [.currency("coins", 100)], at: Self.t0) else {
            Issue.record("\(record.key) not granted")
            return
        }
    }

    /// Each decision the lifecycle refuses in a state is answered with that state, and changes nothing.
    @Test(arguments: RepositoryKind.available) func whatTheLifecycleRefusesIsAnsweredWithTheState(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let unseen = PurchaseKey(store: .appstore, transactionId: "never")
        #expect(try await store.grant(unseen, items: [.currency("coins", 100)], at: Self.t0) == .notGrantable(state: nil), "the grant waits for its purchase")
        #expect(try await store.finish(unseen, at: Self.t0) == .notGranted(state: nil))
        #expect(try await store.revoke(unseen, onlyIfDue: true, at: Self.t0) == .notRevocable(state: .unseen), "nothing flagged to claw back")
        #expect(try await store.transfer(unseen, to: "user-2", policy: .transfer, at: Self.t0) == .refused(owner: "", reason: .transactionOfAnotherUser))
        #expect(try await store.expireSubscription(unseen, at: Self.t0) == .nothingToEnd(state: .unseen))
        #expect(try await store.extendSubscription(unseen, to: Self.t0, at: Self.t0) == .unchanged(state: .unseen))
        #expect(try await store.purchase(unseen) == nil)
        #expect(try await store.states(of: [unseen]).isEmpty)

        let due = purchase("due-1")
        try await granted(due, in: store)
        #expect(try await store.reinstate(due.key, items: [], at: Self.t0) == .notRevoked(state: .granted))
        #expect(try await store.revoke(due.key, onlyIfDue: true, at: Self.t0) == .notRevocable(state: .granted), "not flagged")
        #expect(try await store.sweepDue(store: .appstore, deadline: 3600, now: Self.t0.addingTimeInterval(7200)).map(\.record.key) == [due.key])
        #expect(try await store.grant(due.key, items: [.currency("coins", 100)], at: Self.t0) == .notGrantable(state: .refundDue))
        #expect(try await store.finish(due.key, at: Self.t0) == .notGranted(state: .refundDue), "never finished once flagged")
        #expect(try await store.revoke(due.key, onlyIfDue: true, at: Self.t0) == .revoked(shortfall: [:]), "clawed back")
        #expect(try await store.finish(due.key, at: Self.t0) == .notGranted(state: .revoked))
        #expect(try await store.balances(of: "user-1") == ["coins": 0])
    }

    /// A refund and its reversal are taken in the order the store decided them (`decidedAt`), whichever arrives first: an
    /// older decision is `outdated` and changes nothing, for a recorded purchase as for one not seen yet.
    @Test(arguments: RepositoryKind.available) func refundDecisionsAreTakenInTheOrderTheStoreMadeThem(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        func day(_ n: Double) -> Date { Self.t0.addingTimeInterval(n * 86_400) }
        let reversedFirst = purchase("o-1")
        try await granted(reversedFirst, in: store)
        #expect(try await store.reinstate(reversedFirst.key, items: [.currency("coins", 100)], decidedAt: day(2), at: day(2)) == .notRevoked(state: .granted))
        #expect(try await store.revoke(reversedFirst.key, decidedAt: day(1), at: day(3)) == .outdated, "its reversal came first")
        #expect(try await store.revoke(reversedFirst.key, decidedAt: day(2), at: day(3)) == .revoked(shortfall: [:]), "decided at the same time: taken")

        let refundedAgain = purchase("o-2")
        try await granted(refundedAgain, in: store)
        #expect(try await store.revoke(refundedAgain.key, decidedAt: day(3), at: day(3)) == .revoked(shortfall: [:]))
        #expect(try await store.reinstate(refundedAgain.key, items: [], decidedAt: day(2), at: day(4)) == .outdated, "refunded again since")
        #expect(try await store.states(of: [refundedAgain.key]) == [refundedAgain.key: .revoked])

        let unseen = purchase("o-3")
        #expect(try await store.reinstate(unseen.key, items: [], decidedAt: day(2), at: day(2)) == .notRevoked(state: .unseen))
        #expect(try await store.revoke(unseen.key, decidedAt: day(1), at: day(3)) == .outdated, "no tombstone for a refund reversed already")
        try await granted(unseen, in: store)
        #expect(try await store.revoke(unseen.key, decidedAt: day(5), at: day(5)) == .revoked(shortfall: [:]))
        #expect(try await store.balances(of: "user-1") == ["coins": 0])
        #expect(try await store.bookMismatches() == [])
    }

    /// A batch's decisions see one another (a repeat within it answers as a repeat), and a batch whose body throws leaves
    /// nothing of what it did; the repository goes on after it.
    @Test(arguments: RepositoryKind.available) func aBatchDecidesAsAloneAndOneThatThrowsLeavesNothing(_ kind: RepositoryKind) async throws {
        struct Abandoned: Error {}
        let store = try await kind.fresh()
        let (first, second) = (purchase("b-1"), purchase("b-2"))
        let outcomes = try await store.batch {
            try await store.readAhead([first.key, first.key], ownersBalances: true)
            let recorded = try await store.recordVerified(first, at: Self.t0)
            let again = try await store.recordVerified(first, at: Self.t0)
            let grant = try await store.grant(first.key, items: [.currency("coins", 100)], at: Self.t0)
            let repeated = try await store.grant(first.key, items: [.currency("coins", 100)], at: Self.t0)
            return (recorded, again, grant, repeated)
        }
        #expect(outcomes.0 == .recorded && outcomes.1 == .existing(state: .verified, userId: "user-1"))
        guard case .granted(_, let balances, _, _) = outcomes.2 else { Issue.record("\(outcomes.2)"); return }
        #expect(balances == ["coins": 100])
        #expect(outcomes.3 == .alreadyGranted(items: [.currency("coins", 100)], balances: ["coins": 100]), "a repeat within the batch")

        await #expect(throws: Abandoned.self) {
            try await store.batch {
                try await store.readAhead([second.key], ownersBalances: true)
                #expect(try await store.recordVerified(second, at: Self.t0) == .recorded)
                _ = try await store.grant(second.key, items: [.currency("coins", 100)], at: Self.t0)
                _ = try await store.revoke(first.key, at: Self.t0)
                try await store.recordConsent(userId: "user-1", consumptionData: true, decidedAt: Self.t0, now: Self.t0)
                throw Abandoned()
            }
        }
        #expect(try await store.states(of: [first.key, second.key]) == [first.key: .granted], "rolled back")
        #expect(try await store.balances(of: "user-1") == ["coins": 100])
        #expect(try await store.consumptionDataConsent(of: "user-1") == nil)
        #expect(try await store.recordVerified(second, at: Self.t0) == .recorded, "the repository goes on")
        #expect(try await store.bookMismatches() == [])
    }

    /// Users and transactions whose ids are equal Swift strings but not equal bytes are two users and two purchases.
    @Test(arguments: RepositoryKind.available) func idsAreTheirBytes(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let (precomposed, decomposed): (String, String) = ("caf\u{E9}", "cafe\u{301}")
        try await granted(purchase(TransactionID(precomposed), user: UserID(precomposed)), in: store)
        try await granted(purchase(TransactionID(decomposed), user: UserID(decomposed)), in: store)
        try await granted(purchase("t-3", user: UserID(decomposed)), in: store)
        #expect(try await store.balances(of: UserID(precomposed)) == ["coins": 100])
        #expect(try await store.balances(of: UserID(decomposed)) == ["coins": 200])
        #expect(try await store.revoke(PurchaseKey(store: .appstore, transactionId: TransactionID(precomposed)), at: Self.t0) == .revoked(shortfall: [:]))
        #expect(try await store.balances(of: UserID(decomposed)) == ["coins": 200], "the other spelling's purchase stays")
        #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: TransactionID(decomposed)))?.userId.rawValue.utf8.count == 6)
        for spelling in ConfusableIdentifiers.all.prefix(6) {
            #expect(try await store.claimConsumptionRequest(PurchaseKey(store: .appstore, transactionId: "t-3"), notificationUUID: spelling, at: Self.t0,
                                                            staleAfter: 60) == .claimed, "a request of its own: \(Array(spelling.utf8))")
        }
    }

    /// A Google Play purchase token finds the subscription its purchases continue (the original of the earliest), in its
    /// store only, by its bytes; the app a purchase was bought in is read with its state; open purchases are counted by store
    /// and purchase time.
    @Test(arguments: RepositoryKind.available) func aPurchaseTokenFindsItsSubscription(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        var signup = purchase("GPA.1..0", product: "pass.monthly", type: .autoRenewable, original: "tok-a")
        signup.key = PurchaseKey(store: .googleplay, transactionId: "GPA.1..0")
        signup.purchaseToken = "tok-b"
        signup.app = "puzzle"
        var renewal = signup
        renewal.key = PurchaseKey(store: .googleplay, transactionId: "GPA.1..1")
        renewal.originalTransactionId = "tok-later"
        renewal.purchaseTime = Self.t0.addingTimeInterval(60)
        for record in [signup, renewal] { #expect(try await store.recordVerified(record, at: Self.t0) == .recorded) }
        #expect(try await store.originalTransactionId(store: .googleplay, purchaseToken: "tok-b") == "tok-a", "the earliest purchase's")
        #expect(try await store.originalTransactionId(store: .appcoins, purchaseToken: "tok-b") == nil)
        #expect(try await store.originalTransactionId(store: .googleplay, purchaseToken: "tok-B") == nil)
        #expect(try await store.statesAndEnvironments(of: [signup.key])[signup.key]?.app == "puzzle")
        let read = try await store.purchases([signup.key, renewal.key, PurchaseKey(store: .appstore, transactionId: "GPA.1..0")])
        #expect(read.keys.sorted { $0.transactionId < $1.transactionId } == [signup.key, renewal.key], "the recorded ones, in their store only")
        #expect(read[signup.key]?.purchaseToken == "tok-b" && read[renewal.key]?.originalTransactionId == "tok-later")
        #expect(try await store.openPurchases(store: .googleplay, boughtBefore: Self.t0.addingTimeInterval(30)) == ["puzzle": 1], "bought before then")
        #expect(try await store.openPurchases(store: .googleplay, boughtBefore: Self.t0.addingTimeInterval(3600)) == ["puzzle": 2])
        _ = try await store.grant(signup.key, items: [], at: Self.t0)
        _ = try await store.finish(signup.key, at: Self.t0)
        #expect(try await store.openPurchases(store: .googleplay, boughtBefore: Self.t0.addingTimeInterval(3600)) == ["puzzle": 1], "a finished one is not open")
        #expect(try await store.openPurchases(store: .appstore, boughtBefore: Self.t0.addingTimeInterval(3600)).isEmpty)
    }

    /// The reads the stages decide with: environments, the owner of a subscription, what a user holds under an original,
    /// the consumption report kept with the purchase (the first stands), and the outbox of refund notices.
    @Test(arguments: RepositoryKind.available) func theReadsTheStagesDecideWith(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let first = purchase("s-1", user: "user-a", product: "pass.monthly", type: .autoRenewable, original: "s-1", environment: "Sandbox")
        let renewal = purchase("s-2", user: "user-b", product: "pass.monthly", type: .autoRenewable, original: "s-1", at: Self.t0.addingTimeInterval(60))
        for record in [first, renewal] { #expect(try await store.recordVerified(record, at: Self.t0) == .recorded) }
        let found = try await store.statesAndEnvironments(of: [first.key, renewal.key, PurchaseKey(store: .appcoins, transactionId: "s-1")])
        #expect(found.count == 2)
        #expect(found[first.key]?.state == .verified && found[first.key]?.environment == "Sandbox")
        #expect(found[renewal.key]?.state == .verified && found[renewal.key]?.environment == nil)
        #expect(try await store.owner(store: .appstore, originalTransactionId: "s-1") == "user-b", "the latest period's")
        #expect(try await store.owner(store: .appcoins, originalTransactionId: "s-1") == nil, "another store's namespace")
        #expect(try await store.purchases(store: .appstore, originalTransactionId: "s-1", ownedBy: "user-a") == [first.key])

        let coins = purchase("c-1")
        #expect(try await store.appReportedConsumption(coins.key) == nil)
        #expect(try await store.recordConsumed(coins.key, at: Self.t0.addingTimeInterval(5)) == .beforeItsPurchase)
        #expect(try await store.recordConsumed(coins.key, at: Self.t0.addingTimeInterval(9)) == .beforeItsPurchase)
        #expect(try await store.appReportedConsumption(coins.key) == nil, "not recorded yet")
        try await granted(coins, in: store)
        #expect(try await store.recordConsumed(coins.key, at: Self.t0.addingTimeInterval(20)) == .withItsPurchase)
        #expect(try await store.appReportedConsumption(coins.key) == Self.t0.addingTimeInterval(5), "the first report stands")

        let due = purchase("c-2", at: Self.t0.addingTimeInterval(-10))
        try await granted(due, in: store)
        let flagged = try await store.sweepDue(store: .appstore, deadline: 3600, now: Self.t0.addingTimeInterval(7200))
        #expect(flagged.map(\.record.key) == [due.key], "the consumed one is never flagged")
        #expect(flagged.first?.previousState == .granted && flagged.first?.record.state == .refundDue)
        let unsent = try await store.unsentRefundNotices(store: .appstore, deadline: 3600)
        #expect(unsent.map(\.deadline) == [Self.t0.addingTimeInterval(3590)] && unsent.map(\.previousState) == [.refundDue])
        try await store.markRefundNoticesSent([due.key], at: Self.t0)
        #expect(try await store.unsentRefundNotices(store: .appstore, deadline: 3600).isEmpty)
    }
}

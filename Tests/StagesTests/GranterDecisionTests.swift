import Foundation
import InMemoryPurchaseStore
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import Testing
import WorkerRuntime

/// The granter's decisions on `purchase.verified`, `purchase.revoked` and `refund.due`, alone and in batches, on the
/// in-memory repository: what it answers, and what it leaves in the books.
@Suite struct GranterDecisionTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_800_000)
    let store = InMemoryPurchaseStore()

    func key(_ id: TransactionID) -> PurchaseKey { PurchaseKey(store: .appstore, transactionId: id) }

    /// A purchase of `product` by `user`, recorded as the verifier records it; its `purchase.verified`.
    func verified(_ id: TransactionID, user: UserID = "user-1", product: ProductID = "coins.100", revocationDate: Date? = nil,
                  recorded: Bool = true) async throws -> PurchaseVerifiedEvent {
        let type = StageFixtures.catalog.product(.appstore, product)?.type ?? .consumable
        if recorded {
            #expect(try await store.recordVerified(PurchaseRecord(key: key(id), userId: user, productId: product, productType: type, quantity: 1,
                                                                  purchaseTime: Self.t0), at: Self.t0) == .recorded)
        }
        return PurchaseVerifiedEvent(store: .appstore, transactionId: id, productId: product, productType: type.rawValue, quantity: 1, userId: user,
                                     purchaseDate: Self.t0, revocationDate: revocationDate, source: .client, verifiedAt: Self.t0)
    }

    func handle(_ event: some PipelineEvent, offset: Int64 = 0, clawBack: Bool = false) async throws -> StageResult {
        try await GranterStageTests.granter(store, at: Self.t0, clawBack: clawBack).handle(try StageFixtures.message(event, offset: offset, at: Self.t0))
    }

    func granted(_ result: StageResult?) -> [ItemGranted] { StageFixtures.published(result, as: ItemGranted.self) }
    func rejections(_ result: StageResult?) -> [String] { StageFixtures.published(result, as: PurchaseRejectedEvent.self).map(\.reason) }

    @Test func aGrantRepeatedAnswersAlreadyGrantedWithTheSameItems() async throws {
        let event = try await verified("g-1")
        let first = granted(try await handle(event))
        #expect(first.map(\.alreadyGranted) == [false])
        #expect(first.first?.items == [GrantedItem(kind: .currency, code: "coins", amount: 100, balance: 100)])
        let again = granted(try await handle(event))
        #expect(again.map(\.alreadyGranted) == [true], "granted once")
        #expect(again.first?.items == first.first?.items, "the original items, with the balance now")
        #expect(try await store.balances(of: "user-1") == ["coins": 100])
        #expect(try await store.states(of: [key("g-1")]) == [key("g-1"): .granted])
    }

    @Test func anUnknownProductIsRejectedWithItsReasonAndNothingIsGranted() async throws {
        let result = try await handle(try await verified("u-1", product: "gems.unknown"))
        let rejected = StageFixtures.published(result, as: PurchaseRejectedEvent.self)
        #expect(rejected.map(\.reason) == ["unknownProduct"])
        #expect(rejected.first?.detail?.contains("gems.unknown") == true && rejected.first?.retryable == false)
        #expect(granted(result).isEmpty)
        #expect(try await store.balances(of: "user-1").isEmpty)
        #expect(try await store.states(of: [key("u-1")]) == [key("u-1"): .verified])
    }

    /// Revoked before its grant (the refund's message first, or the store signing the transaction revoked): never granted.
    @Test func aPurchaseRevokedBeforeItsGrantIsRejected() async throws {
        let refundedFirst = try await verified("r-1")
        #expect(granted(try await handle(PurchaseRevokedEvent(store: .appstore, transactionId: "r-1", reason: .REFUND, revokedAt: Self.t0))).isEmpty)
        #expect(rejections(try await handle(refundedFirst)) == ["revoked"])
        let signedRevoked = try await verified("r-2", revocationDate: Self.t0)
        #expect(rejections(try await handle(signedRevoked)) == ["revoked"])
        #expect(try await store.states(of: [key("r-1"), key("r-2")]) == [key("r-1"): .revoked, key("r-2"): .revoked])
        #expect(try await store.balances(of: "user-1").isEmpty)
    }

    /// A grant of a purchase the store has not recorded (a store that lost it, or not the verifier's) is retried, not answered.
    @Test func aGrantOfAPurchaseNotRecordedIsTransient() async throws {
        let stage = GranterStageTests.granter(store, at: Self.t0)
        let message = try StageFixtures.message(try await verified("n-1", recorded: false), at: Self.t0)
        let error = await #expect(throws: TransientError.self) { try await stage.handle(message) }
        #expect(error.map(stage.isTransient) == true)
    }

    /// 100 coins granted, 70 spent in the game, then refunded: the 30 left are taken back, never below zero; a repeat of
    /// the refund changes nothing, and the purchase is never granted again.
    @Test func aRefundAfterTheGrantTakesBackWhatIsLeft() async throws {
        let event = try await verified("s-1")
        _ = try await handle(event)
        try await store.setBalance(of: "user-1", "coins", to: 30)
        let refund = PurchaseRevokedEvent(store: .appstore, transactionId: "s-1", reason: .REFUND, revokedAt: Self.t0)
        guard case .publish(let out) = try await handle(refund) else { Issue.record("not answered"); return }
        #expect(out.isEmpty)
        #expect(try await store.balances(of: "user-1") == ["coins": 0])
        _ = try await handle(refund)
        #expect(try await store.balances(of: "user-1") == ["coins": 0], "refunded once")
        #expect(rejections(try await handle(event)) == ["revoked"])
        #expect(try await store.grantedItems(key("s-1")).isEmpty)
    }

    /// A due refund (`refund.due`) is clawed back only with claw-back on, and only from a purchase still flagged.
    @Test func aDueRefundIsClawedBackOnlyWhenAsked() async throws {
        _ = try await handle(try await verified("d-1"))
        let flagged = try await store.sweepDue(store: .appstore, deadline: 3600, now: Self.t0.addingTimeInterval(7200))
        let due = try #require(flagged.first)
        let notice = RefundDue(store: .appstore, transactionId: "d-1", userId: "user-1", productId: "coins.100", state: nil, purchaseDate: Self.t0,
                               deadline: due.deadline, flaggedAt: Self.t0)
        _ = try await handle(notice)
        #expect(try await store.balances(of: "user-1") == ["coins": 100], "claw-back off")
        _ = try await handle(notice, clawBack: true)
        #expect(try await store.balances(of: "user-1") == ["coins": 0])
        #expect(try await store.states(of: [key("d-1")]) == [key("d-1"): .revoked])
    }

    /// In one batch, a purchase's second `purchase.verified` answers as a repeat, with the balance the first left.
    @Test func aRepeatWithinABatchAnswersAsARepeat() async throws {
        let (first, other) = (try await verified("b-1"), try await verified("b-2"))
        let messages = try [first, first, other].enumerated().map { try StageFixtures.message($1, offset: Int64($0), at: Self.t0) }
        let results = await GranterStageTests.granter(store, at: Self.t0).handle(batch: messages)
        let answers = try results.map { granted(try $0.get()) }
        #expect(answers.map { $0.map(\.alreadyGranted) } == [[false], [true], [false]])
        #expect(answers[1].first?.items == [GrantedItem(kind: .currency, code: "coins", amount: 100, balance: 100)])
        #expect(answers[2].first?.items.first?.balance == 200)
        #expect(try await store.balances(of: "user-1") == ["coins": 200])
    }

    /// A message failing in a batch rolls the batch back: the messages before it are granted again in a batch of their own
    /// and answered, and the rest are handed over again (the failing one alone, when it fails again in their batch): each
    /// answered once it passes, the rest answered whether it does or not. Each purchase is granted once.
    @Test(arguments: [1, 3]) func aFailingMessageInABatchRollsItBackAndTheRestStillAnswer(failures: Int) async throws {
        let events = [try await verified("f-1"), try await verified("f-2"), try await verified("f-3")]
        let messages = try events.enumerated().map { try StageFixtures.message($1, offset: Int64($0), at: Self.t0) }
        let stage = GranterStageTests.granter(store, at: Self.t0)
        store.failNext(touching: key("f-2"), times: failures)

        let batch = await stage.handle(batch: messages)
        #expect(batch.count == 1, "answered up to the failing message")
        #expect(try batch.map { granted(try $0.get()).map(\.alreadyGranted) } == [[false]], "granted in a batch of its own")
        // (Not reading f-2: a read of it would take one of the failures injected for it.)
        #expect(try await store.states(of: [key("f-1"), key("f-3")]) == [key("f-1"): .granted, key("f-3"): .verified], "the rest rolled back")

        let rest = await handleAsTheRunnerDoes(stage, Array(messages.dropFirst()))
        #expect(rest.count == 2)
        if failures == 1 {
            let answer = try rest[0].get()
            #expect(granted(answer).map(\.alreadyGranted) == [false], "handed over again, it passes")
        } else {
            let error = rest[0].failure
            #expect(error is InjectedStoreFailure && error.map(stage.isTransient) == true, "retried by the runner: \(String(describing: error))")
        }
        let last = try rest[1].get()
        #expect(granted(last).map(\.alreadyGranted) == [false], "the rest still answer")
        #expect(try await store.balances(of: "user-1") == ["coins": failures == 1 ? 300 : 200])
        #expect(try await store.states(of: [key("f-2")]) == [key("f-2"): failures == 1 ? .granted : .verified])
        #expect(try await store.bookMismatches() == [])
    }
}

extension Result {
    /// The error, if it failed.
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

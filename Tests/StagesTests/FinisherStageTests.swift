import Foundation
import InMemoryPurchaseStore
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import Testing
import WorkerRuntime

/// The finisher's decisions without the App Store Server API (AppCoins, and App Store without credentials), on the
/// in-memory repository: it never finishes what was not granted; a purchase is finished once the app or the store reports
/// it consumed, or at its grant for an entitlement; and the store's consumption requests are answered or recorded unanswered.
@Suite struct FinisherStageTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_900_000)
    let store = InMemoryPurchaseStore()
    let stage: FinisherStage

    init() {
        stage = FinisherStage(context: StageContext(codec: StageFixtures.codec, logger: Logger(stage: "t", minimum: .error), now: { Self.t0 }),
                              store: store, appStoreAPI: nil)
    }

    /// A purchase recorded as the verifier records it (and granted 100 coins, or what its product gives, unless not).
    @discardableResult
    func purchase(_ id: TransactionID, store storeName: Store = .appcoins, product: ProductID = "coins.100", type: ProductType = .consumable,
                  granted: Bool = true, storeConsumed: Bool = false) async throws -> PurchaseKey {
        let key = PurchaseKey(store: storeName, transactionId: id)
        #expect(try await store.recordVerified(PurchaseRecord(key: key, userId: "user-1", productId: product, productType: type, quantity: 1,
                                                              purchaseTime: Self.t0, storeConsumed: storeConsumed), at: Self.t0) == .recorded)
        if granted {
            let items: [GrantItem] = type.isEntitlement ? [.entitlement("adfree")] : [.currency("coins", 100)]
            guard case .granted = try await store.grant(key, items: items, at: Self.t0) else { Issue.record("\(id) not granted"); return key }
        }
        return key
    }

    func itemGranted(_ key: PurchaseKey, product: ProductID = "coins.100") -> ItemGranted {
        ItemGranted(store: key.store, transactionId: key.transactionId, userId: "user-1", productId: product, quantity: 1,
                    items: [GrantedItem(kind: .currency, code: "coins", amount: 100)], alreadyGranted: false, grantedAt: Self.t0)
    }

    func consumed(_ key: PurchaseKey) -> PurchaseConsumed { PurchaseConsumed(store: key.store, transactionId: key.transactionId, userId: "user-1", consumedAt: Self.t0) }

    func handle(_ event: some PipelineEvent) async throws -> StageResult { try await stage.handle(try StageFixtures.message(event, at: Self.t0)) }

    /// How each finished purchase was finished (`transaction.finished`'s method).
    func finished(_ result: StageResult) -> [TransactionFinished.Method] { StageFixtures.published(result, as: TransactionFinished.self).map(\.method) }

    @Test func whatWasNotGrantedIsNeverFinished() async throws {
        let verifiedOnly = try await purchase("v-1", granted: false)
        #expect(finished(try await handle(itemGranted(verifiedOnly))).isEmpty, "an item.granted that overtook nothing")
        #expect(finished(try await handle(consumed(verifiedOnly))).isEmpty, "a report before the grant waits for it")
        #expect(try await store.states(of: [verifiedOnly]) == [verifiedOnly: .verified])
        #expect(try await store.appReportedConsumption(verifiedOnly) == Self.t0, "kept with its purchase")

        let refunded = try await purchase("r-1")
        _ = try await store.revoke(refunded, at: Self.t0)
        #expect(finished(try await handle(itemGranted(refunded))).isEmpty)
        guard case .deadLetter(let reason, _) = try await handle(consumed(refunded)) else { Issue.record("a revoked purchase finished"); return }
        #expect(reason == "notGranted")
        #expect(try await store.states(of: [refunded]) == [refunded: .revoked])

        let unseen = PurchaseKey(store: .appcoins, transactionId: "u-1")
        #expect(finished(try await handle(consumed(unseen))).isEmpty)
        #expect(try await store.purchase(unseen) == nil)
        #expect(try await store.consumptionReportsWaiting() == 1, "kept until its purchase is recorded")
    }

    /// A report that came before the grant finishes the purchase at its grant; a report after the grant finishes it at once;
    /// a purchase nobody reported consumed stays granted.
    @Test func aConsumableIsFinishedOnceReportedConsumed() async throws {
        let reportedFirst = try await purchase("c-1", granted: false)
        _ = try await handle(consumed(reportedFirst))
        _ = try await store.grant(reportedFirst, items: [.currency("coins", 100)], at: Self.t0)
        #expect(finished(try await handle(itemGranted(reportedFirst))) == [.consumedByApp])

        let reportedAfter = try await purchase("c-2")
        #expect(finished(try await handle(itemGranted(reportedAfter))).isEmpty, "not consumed yet")
        #expect(finished(try await handle(consumed(reportedAfter))) == [.consumedByApp])
        #expect(finished(try await handle(consumed(reportedAfter))) == [.consumedByApp], "a repeat answers the same event again")

        let byTheStore = try await purchase("c-3", storeConsumed: true)
        #expect(finished(try await handle(itemGranted(byTheStore))) == [.storeReportedConsumed])
        let entitlement = try await purchase("e-1", store: .appstore, product: "adfree", type: .nonConsumable)
        #expect(finished(try await handle(itemGranted(entitlement, product: "adfree"))) == [.entitlementGranted])
        #expect(try await store.states(of: [reportedFirst, reportedAfter, byTheStore, entitlement]).values.allSatisfy { $0 == .finished })
    }

    /// A consumption request is answered only for a purchase the pipeline recorded, of a user who consented; without API
    /// credentials, why not is recorded, once.
    @Test func aConsumptionRequestIsRecordedWithWhyItWasNotAnswered() async throws {
        let key = try await purchase("q-1", store: .appstore)
        func request(_ id: TransactionID, _ uuid: String) -> ConsumptionRequested {
            ConsumptionRequested(store: .appstore, transactionId: id, notificationUUID: uuid, requestedAt: Self.t0.addingTimeInterval(-120),
                                 answerBy: Self.t0.addingTimeInterval(3600))
        }
        _ = try await handle(request("never-seen", "n-0"))
        _ = try await handle(request(key.transactionId, "n-1"))
        _ = try await handle(UserConsent(userId: "user-1", consumptionData: true, decidedAt: Self.t0.addingTimeInterval(-60)))
        _ = try await handle(request(key.transactionId, "n-2"))
        #expect(try await store.consumptionAnswer(notificationUUID: "n-0")?.outcome == "unknownPurchase")
        #expect(try await store.consumptionAnswer(notificationUUID: "n-1")?.outcome == "noConsent")
        #expect(try await store.consumptionAnswer(notificationUUID: "n-2")?.outcome == "noAPICredentials")
        #expect(try await store.claimConsumptionRequest(key, notificationUUID: "n-2", at: Self.t0, staleAfter: 300)
                == .answered(ConsumptionAnswer(outcome: "noAPICredentials", detail: "the finisher has no App Store Server API credentials", answeredAt: Self.t0)))
    }

    /// A batch of grants and reports: each answered as alone, none finished that was not granted.
    @Test func aBatchOfGrantsAndReportsAnswersEachAsAlone() async throws {
        let (granted, verifiedOnly) = (try await purchase("b-1"), try await purchase("b-2", granted: false))
        let events: [any PipelineEvent] = [consumed(granted), itemGranted(granted), consumed(verifiedOnly), itemGranted(verifiedOnly)]
        let messages = try events.enumerated().map { offset, event in try StageFixtures.message(event, offset: Int64(offset), at: Self.t0) }
        let results = await stage.handle(batch: messages)
        #expect(try results.map { finished(try $0.get()) } == [[.consumedByApp], [.consumedByApp], [], []])
        #expect(try await store.states(of: [granted, verifiedOnly]) == [granted: .finished, verifiedOnly: .verified])
    }
}

import Foundation
import InMemoryPurchaseStore
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import Testing
import WorkerRuntime

/// The sweeper on the in-memory repository, its `refund.due` events sent to librdkafka's in-process mock cluster: what it
/// flags, exactly once, and its outbox.
@Suite struct SweeperServiceTests {
    static let t0 = Date(timeIntervalSince1970: 1_765_000_000)
    let store = InMemoryPurchaseStore()
    /// Kept for the test's length: the producer's broker.
    let cluster: KafkaMockCluster

    init() throws {
        cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic(StageFixtures.codec.topic(.refundDue), partitions: 1)
    }

    func purchase(_ id: TransactionID, product: ProductID = "coins.100", type: ProductType = .consumable, at time: Date = t0,
                  granted: Bool = true) async throws -> PurchaseKey {
        let key = PurchaseKey(store: .appstore, transactionId: id)
        _ = try await store.recordVerified(PurchaseRecord(key: key, userId: "user-1", productId: product, productType: type, quantity: 1, purchaseTime: time),
                                          at: time)
        if granted { _ = try await store.grant(key, items: [type.isEntitlement ? .entitlement("adfree") : .currency("coins", 100)], at: time) }
        return key
    }

    func sweeper(now: Date) throws -> SweeperService<ContinuousClock> {
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": cluster.bootstrapServers])))
        return SweeperService(configuration: .init(deadlines: [.appstore: 86_400], batchSize: 2), store: store, producer: producer,
                              context: StageContext(codec: StageFixtures.codec, logger: Logger(stage: "sweeper", minimum: .error), now: { now }),
                              clock: ContinuousClock())
    }

    /// Consumables unconsumed past their deadline are flagged (more than a batch of them), once, and their notices sent;
    /// one reported consumed, an entitlement, and a recent purchase are not.
    @Test func dueConsumablesAreFlaggedOnceAndTheirNoticesSent() async throws {
        let now = Self.t0.addingTimeInterval(2 * 86_400)
        var due: [PurchaseKey] = []
        for index in 0..<3 { due.append(try await purchase("due-\(index)", at: Self.t0.addingTimeInterval(Double(index)))) }
        due.append(try await purchase("due-verified", granted: false))
        let consumed = try await purchase("consumed")
        _ = try await store.recordConsumed(consumed, at: Self.t0)
        let adfree = try await purchase("adfree", product: "adfree", type: .nonConsumable)
        let recent = try await purchase("recent", at: now.addingTimeInterval(-3600))

        let sweeper = try sweeper(now: now)
        #expect(try await sweeper.sweepOnce() == 4)
        let states = try await store.states(of: due + [consumed, adfree, recent])
        #expect(due.allSatisfy { states[$0] == .refundDue })
        #expect([consumed, adfree, recent].allSatisfy { states[$0] == .granted })
        #expect(try await store.unsentRefundNotices(store: .appstore, deadline: 86_400).isEmpty, "every notice sent and marked")
        #expect(try await sweeper.sweepOnce() == 0, "flagged once")
        #expect(sweeper.flaggedDue[.appstore] == 4 && sweeper.flaggedDue.values.reduce(0, +) == 4, "counted once, by store (iap_refunds_flagged_total)")
    }

    /// A charge the store announced that nobody claimed is flagged at its deadline like any unconsumed consumable, once;
    /// its notice names no user and says so.
    @Test func anUnclaimedChargeIsFlaggedAtItsDeadlineWithANoticeThatNamesNoUser() async throws {
        let key = PurchaseKey(store: .appstore, transactionId: "unclaimed-1")
        _ = try await store.recordUnclaimed(PurchaseRecord(key: key, userId: .nobody, productId: "coins.100", productType: .consumable, quantity: 1,
                                                           purchaseTime: Self.t0), at: Self.t0)
        let sweeper = try sweeper(now: Self.t0.addingTimeInterval(2 * 86_400))
        #expect(try await sweeper.sweepOnce() == 1)
        #expect(try await sweeper.sweepOnce() == 0, "once")
        let notices = try await StageFixtures.events(RefundDue.self, atLeast: 1, at: cluster.bootstrapServers).map(\.event)
        #expect(notices.map(\.transactionId) == ["unclaimed-1"])
        #expect(notices.first?.userId == nil && notices.first?.unclaimed == true)
    }

    /// A sweep the store fails for flags nothing and sends nothing; the next one does it all.
    @Test func aFailedSweepLeavesItAllToTheNext() async throws {
        let now = Self.t0.addingTimeInterval(2 * 86_400)
        let key = try await purchase("due")
        let sweeper = try sweeper(now: now)
        store.failNext()
        await #expect(throws: InjectedStoreFailure.self) { try await sweeper.sweepOnce() }
        #expect(try await store.states(of: [key]) == [key: .granted])
        #expect(try await sweeper.sweepOnce() == 1)
        #expect(try await store.unsentRefundNotices(store: .appstore, deadline: 86_400).isEmpty)
    }

    /// The rejections kept for the users' histories past the retention (90 days by default) go on the regular pass, more
    /// than a batch of them (2 here) at a time; the newer stay.
    @Test func rejectionsPastTheirRetentionArePrunedOnTheRegularPass() async throws {
        let old = (0..<5).map { index in
            RejectionRecord(causeID: "old-\(index)", userId: "user-1", store: .appstore, reason: "invalidSignature",
                            rejectedAt: Self.t0.addingTimeInterval(-91 * 86_400 + Double(index)))
        }
        let recent = RejectionRecord(causeID: "recent", userId: "user-1", store: .appstore, transactionId: "t-1", reason: "wrongBundle",
                                     rejectedAt: Self.t0.addingTimeInterval(-89 * 86_400))
        try await store.recordRejections(old + [recent])
        #expect(try await sweeper(now: Self.t0).sweepOnce() == 0)
        #expect(try await store.rejections(of: "user-1") == [recent])
    }
}

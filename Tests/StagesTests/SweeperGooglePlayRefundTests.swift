import Foundation
import InMemoryPurchaseStore
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Testing
import WorkerRuntime

/// With claw-back on, the sweeper refunds a due Google Play purchase's order itself (`orders.refund`, a stand-in over
/// real HTTP) before its `refund.due` goes out, once, and the notice says what became of the money.
@Suite struct SweeperGooglePlayRefundTests {
    static let now = Date(timeIntervalSince1970: 1_765_000_000)
    static let package = SweeperGooglePlayFixture.package
    let fixture: SweeperGooglePlayFixture
    var store: InMemoryPurchaseStore { fixture.store }
    var cluster: KafkaMockCluster { fixture.cluster }
    var api: GooglePlayAPIStandIn { fixture.api }

    init() throws { fixture = try SweeperGooglePlayFixture() }

    func sweeper(refunds: Bool = true) throws -> SweeperService<ContinuousClock> { try fixture.sweeper(now: Self.now, refunds: refunds) }

    /// A consumable of `user` bought four days ago and never consumed (granted, its consume failing), which Google holds
    /// with `purchaseState` (nil: Google does not know it).
    func due(_ order: TransactionID, of user: UserID, purchaseState: Int?) async throws {
        let token = PurchaseToken("token-\(order.rawValue)")
        let key = PurchaseKey(store: .googleplay, transactionId: order)
        _ = try await store.recordVerified(PurchaseRecord(key: key, userId: user, productId: "coins.100", productType: .consumable, quantity: 1,
                                                          purchaseTime: Self.now.addingTimeInterval(-4 * 86_400), environment: "Production",
                                                          originalTransactionId: TransactionID(token), packageName: Self.package, purchaseToken: token),
                                           at: Self.now)
        _ = try await store.grant(key, items: [.currency("coins", 100)], at: Self.now)
        if let purchaseState {
            api.set(token, .init(packageName: Self.package, productId: "coins.100", orderId: order, purchaseState: purchaseState,
                                 purchaseTime: Self.now.addingTimeInterval(-4 * 86_400)))
        }
    }

    @Test func eachDueOrderIsRefundedOnceUnlessGoogleDidAndTheNoticeSaysWhich() async throws {
        try await due("GPA.1", of: "user-1", purchaseState: 0)
        try await due("GPA.2", of: "user-2", purchaseState: 1)
        try await due("GPA.3", of: "user-3", purchaseState: nil)
        let sweeper = try sweeper()
        #expect(try await sweeper.sweepOnce() == 3)
        #expect(api.refundCount("GPA.1") == 1 && api.refundCount("GPA.2") == 0)
        #expect(api.requests.contains("POST /androidpublisher/v3/applications/com.example.coins/orders/GPA.1:refund"))
        #expect(api.purchase("token-GPA.1")?.purchaseState == 1, "refunded and revoked")
        let notices = try await StageFixtures.events(RefundDue.self, atLeast: 3, at: cluster.bootstrapServers).map(\.event)
        let refunds = Dictionary(uniqueKeysWithValues: notices.map { ($0.transactionId, $0.storeRefund) })
        #expect(refunds == ["GPA.1": .refunded, "GPA.2": .alreadyRefunded, "GPA.3": .refused])

        try await sweeper.sweepOnce()
        #expect(api.refundCount("GPA.1") == 1, "once: the notice was recorded sent")
    }

    /// While Google cannot be asked, nothing is refunded and the notices wait; the next sweep refunds and sends them.
    @Test func noticesWaitWhileGoogleCannotBeAsked() async throws {
        try await due("GPA.1", of: "user-1", purchaseState: 0)
        api.fail(503)
        let sweeper = try sweeper()
        try await sweeper.sweepOnce()
        #expect(try await store.unsentRefundNotices(store: .googleplay, deadline: 259_200).count == 1, "flagged, its notice not sent")
        #expect(sweeper.storeChecks["googlePlayUnavailable"] == 1)
        api.fail(nil)
        try await sweeper.sweepOnce()
        #expect(api.refundCount("GPA.1") == 1)
        #expect(try await store.unsentRefundNotices(store: .googleplay, deadline: 259_200).isEmpty)
        let notice = try #require(try await StageFixtures.events(RefundDue.self, atLeast: 1, at: cluster.bootstrapServers).first?.event)
        #expect(notice.storeRefund == .refunded)
    }

    /// Without claw-back, Google is not asked: the notice leaves the money to the operator.
    @Test func withoutClawBackNothingIsRefunded() async throws {
        try await due("GPA.1", of: "user-1", purchaseState: 0)
        try await sweeper(refunds: false).sweepOnce()
        let notice = try #require(try await StageFixtures.events(RefundDue.self, atLeast: 1, at: cluster.bootstrapServers).first?.event)
        #expect(notice.storeRefund == nil && api.refundCount("GPA.1") == 0)
    }
}

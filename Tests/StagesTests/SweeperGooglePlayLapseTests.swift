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

/// The sweeper settling Google Play subscriptions whose latest period expired with nothing heard since, with
/// `subscriptionsv2` (a stand-in over real HTTP): a renewal or a grace period whose notification never came is handed to
/// the verifier as the notification Google would have pushed; every one's status is recorded and announced, once.
@Suite struct SweeperGooglePlayLapseTests {
    static let now = Date(timeIntervalSince1970: 1_765_000_000)
    static let package = SweeperGooglePlayFixture.package
    let fixture: SweeperGooglePlayFixture
    var store: InMemoryPurchaseStore { fixture.store }
    var cluster: KafkaMockCluster { fixture.cluster }
    var api: GooglePlayAPIStandIn { fixture.api }

    init() throws { fixture = try SweeperGooglePlayFixture() }

    func sweeper() throws -> SweeperService<ContinuousClock> { try fixture.sweeper(now: Self.now) }

    /// A subscription of `user` (its token `token`) whose one recorded period `order` expired `expiredAgo` seconds ago;
    /// Google answers `answer` for the token.
    func subscription(_ token: PurchaseToken, order: TransactionID, of user: UserID, expiredAgo: TimeInterval,
                      answer: GooglePlayAPIStandIn.Subscription) async throws {
        let expires = Self.now.addingTimeInterval(-expiredAgo)
        let key = PurchaseKey(store: .googleplay, transactionId: order)
        _ = try await store.recordVerified(PurchaseRecord(key: key, userId: user, productId: "pass.monthly", productType: .autoRenewable, quantity: 1,
                                                          purchaseTime: expires.addingTimeInterval(-30 * 86_400), environment: "Production",
                                                          originalTransactionId: TransactionID(token), packageName: Self.package, purchaseToken: token,
                                                          expiresDate: expires), at: Self.now)
        _ = try await store.grant(key, items: [.entitlement("pass", until: expires)], at: Self.now)
        api.set(token, answer)
    }

    func answer(_ state: String, order: TransactionID, expiresIn: TimeInterval, cancellation: String? = nil) -> GooglePlayAPIStandIn.Subscription {
        .init(packageName: Self.package, productId: "pass.monthly", state: state, latestOrderId: order, startTime: Self.now.addingTimeInterval(-60 * 86_400),
              expiryTime: Self.now.addingTimeInterval(expiresIn), acknowledged: true, cancellation: cancellation)
    }

    @Test func aRenewalOrGraceNobodyToldOfIsNotifiedAndEachStatusRecordedOnce() async throws {
        try await subscription("tok-renewed", order: "GPA.1..0", of: "user-1", expiredAgo: 86_400,
                               answer: answer("SUBSCRIPTION_STATE_ACTIVE", order: "GPA.1..1", expiresIn: 29 * 86_400))
        try await subscription("tok-grace", order: "GPA.2..0", of: "user-2", expiredAgo: 2 * 3_600,
                               answer: answer("SUBSCRIPTION_STATE_IN_GRACE_PERIOD", order: "GPA.2..0", expiresIn: 5 * 86_400))
        try await subscription("tok-canceled", order: "GPA.3..0", of: "user-3", expiredAgo: 86_400,
                               answer: answer("SUBSCRIPTION_STATE_EXPIRED", order: "GPA.3..0", expiresIn: -86_400, cancellation: "userInitiatedCancellation"))
        // Not asked: expired too recently, or too long ago.
        try await subscription("tok-recent", order: "GPA.4..0", of: "user-4", expiredAgo: 600,
                               answer: answer("SUBSCRIPTION_STATE_ACTIVE", order: "GPA.4..1", expiresIn: 30 * 86_400))
        try await subscription("tok-old", order: "GPA.5..0", of: "user-5", expiredAgo: 5 * 86_400,
                               answer: answer("SUBSCRIPTION_STATE_ACTIVE", order: "GPA.5..1", expiresIn: 25 * 86_400))

        let sweeper = try sweeper()
        try await sweeper.sweepOnce()
        let asked = api.requests.filter { $0.contains("/subscriptionsv2/") }
        #expect(asked.count == 3 && ["tok-renewed", "tok-grace", "tok-canceled"].allSatisfy { token in asked.contains { $0.hasSuffix("/\(token)") } },
                "\(asked)")

        let notified = try await StageFixtures.events(StoreNotificationReceived.self, atLeast: 2, at: cluster.bootstrapServers)
        let notifications = notified.compactMap { $0.event.developerNotification.flatMap(GooglePlayDeveloperNotification.init(json:)) }
        let kinds = Dictionary(uniqueKeysWithValues: notifications.compactMap { notification -> (PurchaseToken, Int64)? in
            guard case .subscription(let type, let token, let product) = notification.kind, product == "pass.monthly",
                  notification.packageName == Self.package else { return nil }
            return (token, type)
        })
        #expect(kinds == ["tok-renewed": 2, "tok-grace": 6], "as Google would have notified: renewed, in grace period")
        let keys = notified.map { $0.message.key.map { String(decoding: $0, as: UTF8.self) } ?? "" }
        #expect(Set(keys) == ["googleplay:tok-renewed", "googleplay:tok-grace"], "keyed by the purchase token, in order with Google's own")

        let grace = try #require(try await store.subscriptionStatus(store: .googleplay, originalTransactionId: "tok-grace"))
        #expect(grace.billingIssueSince != nil && grace.gracePeriodEndsAt == Self.now.addingTimeInterval(5 * 86_400))
        let canceled = try #require(try await store.subscriptionStatus(store: .googleplay, originalTransactionId: "tok-canceled"))
        #expect(canceled.willRenew == false && canceled.expirationReason == .customerCancelled)
        let announced = try await StageFixtures.events(SubscriptionStatusChanged.self, atLeast: 3, at: cluster.bootstrapServers).map(\.event)
        #expect(Set(announced.map(\.originalTransactionId)) == ["tok-renewed", "tok-grace", "tok-canceled"])
        #expect(announced.first { $0.originalTransactionId == "tok-canceled" }?.userId == "user-3")
        #expect(sweeper.storeChecks["googlePlaySubscriptionSettled"] == 3)

        try await sweeper.sweepOnce()
        #expect(api.requests.count { $0.contains("/subscriptionsv2/") } == 3, "each settled once")
    }

    /// An API that cannot answer settles nothing and ends the round: asked again next sweep.
    @Test func anAPIThatCannotAnswerSettlesNothing() async throws {
        try await subscription("tok-1", order: "GPA.1..0", of: "user-1", expiredAgo: 86_400,
                               answer: answer("SUBSCRIPTION_STATE_ACTIVE", order: "GPA.1..1", expiresIn: 29 * 86_400))
        api.fail(503)
        let sweeper = try sweeper()
        try await sweeper.sweepOnce()
        #expect(try await store.subscriptionStatus(store: .googleplay, originalTransactionId: "tok-1") == nil)
        #expect(sweeper.storeChecks["googlePlayUnavailable"] == 1)
        api.fail(nil)
        try await sweeper.sweepOnce()
        #expect(try await store.subscriptionStatus(store: .googleplay, originalTransactionId: "tok-1") != nil, "settled once the API answers")
    }
}

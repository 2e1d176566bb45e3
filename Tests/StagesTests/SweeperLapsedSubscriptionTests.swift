import Crypto
import Foundation
import InMemoryPurchaseStore
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Testing
import WorkerRuntime

/// The sweeper settling subscriptions whose latest period expired with nothing heard since, with *Get All Subscription
/// Statuses* (a stand-in over real HTTP): a renewal the pipeline never received is submitted for the owner, the status
/// is recorded and announced, and each is asked about once.
@Suite struct SweeperLapsedSubscriptionTests {
    static let now = Date(timeIntervalSince1970: 1_765_000_000)
    let fixture: SweeperAppStoreFixture
    var store: InMemoryPurchaseStore { fixture.store }
    var cluster: KafkaMockCluster { fixture.cluster }
    var pki: TestPKI { fixture.pki }
    var api: AppStoreServerAPIStandIn { fixture.api }

    init() throws { fixture = try SweeperAppStoreFixture(name: "lapsed subscriptions") }

    func sweeper() throws -> SweeperService<ContinuousClock> { try fixture.sweeper(now: Self.now) }

    func signedPeriod(_ id: String, original: String, expires: Date) throws -> String {
        try JWSSigner(pki: pki).sign(AppStorePayloads.transaction(
            transactionId: id, originalTransactionId: original, productId: "pass.gold", bundleId: StageFixtures.bundleID.rawValue, environment: .sandbox,
            type: .autoRenewable, purchaseDate: expires.addingTimeInterval(-30 * 86_400), signedDate: Self.now,
            extra: ["expiresDate": .integer(AppStorePayloads.milliseconds(expires))]))
    }

    /// A subscription of `user` whose one recorded period (`original`) expires at `expires`; the store's statuses answer
    /// `latest` (the period it knows last, by id and expiry), with `status` and a renewal info of `renewal`'s fields.
    func subscription(_ original: String, of user: UserID, expires: Date, latest: (id: String, expires: Date)? = nil, status: Int = 2,
                      renewal: [String: JSONValue] = [:]) async throws {
        let key = PurchaseKey(store: .appstore, transactionId: TransactionID(original))
        _ = try await store.recordVerified(PurchaseRecord(key: key, userId: user, productId: "pass.gold", productType: .autoRenewable, quantity: 1,
                                                          purchaseTime: expires.addingTimeInterval(-30 * 86_400), environment: "Sandbox",
                                                          originalTransactionId: TransactionID(original), expiresDate: expires), at: Self.now)
        _ = try await store.grant(key, items: [.entitlement("gold", until: expires)], at: Self.now)
        let last = latest ?? (original, expires)
        let info = try JWSSigner(pki: pki).sign(AppStorePayloads.renewalInfo(originalTransactionId: original, productId: "pass.gold", signedDate: Self.now,
                                                                             extra: renewal))
        api.recordSubscriptionStatus(groupIdentifier: "passes", originalTransactionId: TransactionID(original), status: status,
                                     signedTransaction: try signedPeriod(last.id, original: original, expires: last.expires), signedRenewalInfo: info,
                                     customer: user.rawValue)
    }

    @Test func aRenewalThePipelineNeverReceivedIsSubmittedAndAnExpiryRecordedEachAskedOnce() async throws {
        let renewedUntil = Self.now.addingTimeInterval(28 * 86_400)
        try await subscription("7001", of: "user-1", expires: Self.now.addingTimeInterval(-2 * 86_400), latest: ("7002", renewedUntil), status: 1)
        try await subscription("7101", of: "user-2", expires: Self.now.addingTimeInterval(-86_400),
                               renewal: ["autoRenewStatus": .integer(0), "expirationIntent": .integer(1)])
        // Not asked: expired too long ago, too recently, or heard of since its expiry.
        try await subscription("7201", of: "user-3", expires: Self.now.addingTimeInterval(-5 * 86_400))
        try await subscription("7301", of: "user-4", expires: Self.now.addingTimeInterval(-600))
        try await subscription("7401", of: "user-5", expires: Self.now.addingTimeInterval(-86_400))
        _ = try await store.recordSubscriptionStatus(SubscriptionStatus(store: .appstore, originalTransactionId: "7401", willRenew: false,
                                                                        asOf: Self.now.addingTimeInterval(-3_600)))

        let sweeper = try sweeper()
        try await sweeper.sweepOnce()
        #expect(Set(api.requests.filter { $0.hasPrefix("GET /inApps/v1/subscriptions/") }) == ["GET /inApps/v1/subscriptions/7001",
                                                                                              "GET /inApps/v1/subscriptions/7101"])
        let submitted = try await StageFixtures.events(PurchaseSubmitted.self, atLeast: 1, at: cluster.bootstrapServers).map(\.event)
        #expect(submitted.count == 1)
        #expect(submitted.first?.userId == "user-1" && submitted.first?.source == .server)
        #expect(submitted.first.flatMap { $0.signedTransaction.flatMap { Base64URL.unverifiedJWSPayload($0)?["transactionId"]?.stringValue } } == "7002")
        let expired = try await store.subscriptionStatus(store: .appstore, originalTransactionId: "7101")
        #expect(expired?.willRenew == false && expired?.expirationReason == .customerCancelled)
        let announced = try await StageFixtures.events(SubscriptionStatusChanged.self, atLeast: 2, at: cluster.bootstrapServers).map(\.event)
        #expect(Set(announced.map(\.originalTransactionId)) == ["7001", "7101"])
        #expect(announced.first { $0.originalTransactionId == "7101" }?.userId == "user-2")

        try await sweeper.sweepOnce()
        #expect(api.requests.count { $0.hasPrefix("GET /inApps/v1/subscriptions/") } == 2, "each settled once")
    }

    /// A subscription in its billing grace period (its DID_FAIL_TO_RENEW never arrived) lasts until the grace ends: the
    /// period's `purchase.verified` with that expiry, which the granter extends the entitlement by.
    @Test func aSubscriptionInItsGracePeriodLastsUntilTheGraceEnds() async throws {
        let graceEnd = Self.now.addingTimeInterval(10 * 86_400)
        try await subscription("9001", of: "user-1", expires: Self.now.addingTimeInterval(-2 * 86_400), status: 4,
                               renewal: ["gracePeriodExpiresDate": .integer(AppStorePayloads.milliseconds(graceEnd)), "isInBillingRetryPeriod": .bool(true)])
        try await sweeper().sweepOnce()
        let verified = try await StageFixtures.events(PurchaseVerifiedEvent.self, atLeast: 1, at: cluster.bootstrapServers).map(\.event)
        #expect(verified.map(\.transactionId) == ["9001"])
        #expect(verified.first?.expiresDate == graceEnd && verified.first?.userId == "user-1")
        let status = try await store.subscriptionStatus(store: .appstore, originalTransactionId: "9001")
        #expect(status?.gracePeriodEndsAt == graceEnd && status?.billingIssueSince != nil)
    }

    /// Statuses signed by another chain settle nothing: asked again next sweep.
    @Test func statusesThatDoNotVerifySettleNothing() async throws {
        let forged = try SweeperAppStoreFixture.pki("forger")
        try await subscription("8001", of: "user-1", expires: Self.now.addingTimeInterval(-86_400))
        let info = try JWSSigner(pki: forged).sign(AppStorePayloads.renewalInfo(originalTransactionId: "8001", productId: "pass.gold", signedDate: Self.now))
        api.recordSubscriptionStatus(groupIdentifier: "passes", originalTransactionId: "8001", status: 2,
                                     signedTransaction: try signedPeriod("8001", original: "8001", expires: Self.now.addingTimeInterval(-86_400)),
                                     signedRenewalInfo: info, customer: "user-1")
        let sweeper = try sweeper()
        try await sweeper.sweepOnce()
        try await sweeper.sweepOnce()
        #expect(api.requests.count { $0.hasPrefix("GET /inApps/v1/subscriptions/") } == 2)
        #expect(try await store.subscriptionStatus(store: .appstore, originalTransactionId: "8001") == nil)
    }
}

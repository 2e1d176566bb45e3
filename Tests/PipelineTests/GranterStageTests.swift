import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import Testing
import TestSupport
import WorkerRuntime

/// The granter's answers to the store's later decisions (`purchase.revoked`), message by message on a real store of each
/// engine, at times the test sets: no broker.
@Suite struct GranterStageTests {
    static let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test")
    static let catalog = try! ProductCatalog(contentsOf: TestServices.packageRoot.appendingPathComponent("schemas/examples/catalog.json"),
                                             schemas: PipelineTests.schemas)
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)
    static func day(_ n: Double) -> Date { t0.addingTimeInterval(n * 86_400) }

    /// What the granter answers `event` with at `now`.
    @discardableResult
    func handle(_ event: some PipelineEvent, _ store: SQLPurchaseStore, at now: Date) async throws -> StageResult {
        let stage = GranterStage(context: StageContext(codec: Self.codec, logger: Logger(stage: "t", minimum: .error), now: { now }), store: store,
                                 catalog: Self.catalog, clawBackDueRefunds: false)
        let message = try Self.codec.message(event, time: now)
        return try await stage.handle(KafkaMessage(topic: message.topic, partition: 0, offset: 0, key: message.key, value: message.value,
                                                   headers: message.headers))
    }

    /// A period of the monthly pass of subscription `original`, recorded as the verifier records it and granted.
    func subscribe(_ id: String, original: String, user: String, from: Date, until: Date, _ store: SQLPurchaseStore) async throws {
        let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: "pass.monthly",
                                    productType: .autoRenewable, quantity: 1, purchaseTime: from, originalTransactionId: original)
        #expect(try await store.recordVerified(record, at: from) == .recorded)
        try await handle(PurchaseVerifiedEvent(store: .appstore, transactionId: id, originalTransactionId: original, productId: "pass.monthly",
                                               productType: ProductType.autoRenewable.rawValue, quantity: 1, userId: user, purchaseDate: from,
                                               expiresDate: until, source: .client, verifiedAt: from), store, at: from)
    }

    func expired(_ id: String, original: String, _ reason: PurchaseRevokedEvent.Reason = .EXPIRED, at now: Date) -> PurchaseRevokedEvent {
        PurchaseRevokedEvent(store: .appstore, transactionId: id, originalTransactionId: original, productId: "pass.monthly", reason: reason,
                             notificationUUID: UUID().uuidString, revokedAt: now)
    }

    /// The first period ends on day 30, the user subscribes again (paid to day 65), and the first period's EXPIRED arrives
    /// late, on day 36: it ends what the first period gave, not the newer period. The newer period's own expiry ends it.
    @Test(arguments: StoreEngine.available) func aLateExpiryOfAnEarlierPeriodLeavesTheNewerPeriodPaidFor(_ engine: StoreEngine) async throws {
        let store = try SQLPurchaseStore(url: try await engine.freshURL())
        try await store.migrate()
        try await subscribe("sub-1", original: "sub-1", user: "user-g", from: Self.day(0), until: Self.day(30), store)
        try await subscribe("sub-2", original: "sub-1", user: "user-g", from: Self.day(30), until: Self.day(65), store)
        #expect(try await store.entitlements(of: "user-g", at: Self.day(36)) == ["pass": Self.day(65)])
        try await handle(expired("sub-1", original: "sub-1", at: Self.day(36)), store, at: Self.day(36))
        #expect(try await store.entitlements(of: "user-g", at: Self.day(36)) == ["pass": Self.day(65)], "paid to day 65")
        try await handle(expired("sub-2", original: "sub-1", .GRACE_PERIOD_EXPIRED, at: Self.day(40)), store, at: Self.day(40))
        #expect(try await store.entitlements(of: "user-g", at: Self.day(40)).isEmpty, "the period it names ends now")
    }
}

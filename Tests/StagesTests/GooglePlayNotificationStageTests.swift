import Crypto
import Foundation
import InMemoryPurchaseStore
import JSON
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Testing
import WorkerRuntime

/// Google Play's real-time developer notifications through the verifier, the Android Publisher API played by the
/// stand-in over real HTTP, on the in-memory repository: what each tells is read again from the API.
@Suite struct GooglePlayNotificationStageTests {
    static let package: PackageName = "com.example.coins"
    let store = InMemoryPurchaseStore()
    let api: GooglePlayAPIStandIn
    let verifier: VerifierStage

    init() throws {
        api = try GooglePlayAPIStandIn(purchases: [
            "multi": .init(packageName: Self.package, productId: "coins.100", orderId: "GPA.multi", quantity: 3),
        ])
        let signer = try GooglePlaySigner()
        let key = try PublicKey(subjectPublicKeyInfo: Data(try signer.publicKeyBase64().utf8))
        let client = AndroidPublisherClient(configuration: .init(baseURL: api.baseURL),
                                            serviceAccount: try GoogleServiceAccount(keyFile: Data(try api.serviceAccountKeyJSON().utf8)))
        verifier = VerifierStage(context: StageContext(codec: StageFixtures.codec, logger: Logger(stage: "t", minimum: .error)), store: store,
                                 stores: StoreVerifiers(googlePlay: GooglePlayVerifier(configuration: .init(apps: [Self.package: key]), api: client)))
    }

    func push(_ kind: String, _ fields: [String: JSONValue], token: PurchaseToken) async throws -> StageResult {
        let text = GooglePlayPushSigner.notification(package: Self.package.rawValue, kind, fields)
        return try await verifier.handle(try StageFixtures.message(StoreNotificationReceived(developerNotification: text, purchaseToken: token,
                                                                                              receivedAt: Date())))
    }

    /// Google deprecated `subscriptionId`: a subscription notification without it is read from its token alone
    /// (`purchases.subscriptionsv2`), and the period it tells of is recorded under the product the API names — not
    /// dead-lettered after the push was answered.
    @Test func aSubscriptionNotificationWithoutSubscriptionIdIsReadFromItsTokenAlone() async throws {
        api.set("sub-x", GooglePlayAPIStandIn.Subscription(packageName: Self.package, productId: "pass.monthly", latestOrderId: "GPA.5555..0",
                                                            expiryTime: Date().addingTimeInterval(30 * 86_400)))
        let result = try await push("subscriptionNotification", ["version": .string("1.0"), "notificationType": .integer(4),
                                                                 "purchaseToken": .string("sub-x")], token: "sub-x")
        if case .deadLetter(let reason, let detail) = result { Issue.record("dead-lettered \(reason): \(detail)") }
        let recorded = try #require(try await store.purchase(PurchaseKey(store: .googleplay, transactionId: "GPA.5555..0")))
        #expect(recorded.productId == "pass.monthly" && recorded.state == .unclaimed, "kept for the app's submission: \(recorded.state)")
        #expect(api.requests.contains { $0.hasSuffix("/purchases/subscriptionsv2/tokens/sub-x") })
    }

    /// A voided-purchase notification of a quantity-based partial refund (`refundType` 2) does not say how many units: it
    /// revokes nothing and is not recorded as seen, so the voided-purchases list's entry (with `voidedQuantity`) is
    /// published; a full refund's notification revokes the order.
    @Test func aPartialRefundNotificationLeavesTheUnitsToTheVoidedList() async throws {
        let id = GooglePlayVoidedPurchasesHistory.revocation(packageName: Self.package, transactionId: "GPA.multi", voidedAt: nil, at: Date()).id
        let partial = try await push("voidedPurchaseNotification", ["purchaseToken": .string("multi"), "orderId": .string("GPA.multi"),
                                                                    "productType": .integer(2), "refundType": .integer(2)], token: "multi")
        #expect(StageFixtures.published(partial, as: PurchaseRevokedEvent.self).isEmpty, "no revocation of the whole purchase")
        #expect(try await store.unseenNotifications([try #require(id)]) == [try #require(id)])

        let full = try await push("voidedPurchaseNotification", ["purchaseToken": .string("multi"), "orderId": .string("GPA.multi"),
                                                                 "productType": .integer(2), "refundType": .integer(1)], token: "multi")
        let revoked = StageFixtures.published(full, as: PurchaseRevokedEvent.self)
        #expect(revoked.map(\.transactionId) == ["GPA.multi"] && revoked.first?.refundedQuantity == nil)
        #expect(try await store.unseenNotifications([try #require(id)]).isEmpty)
    }
}

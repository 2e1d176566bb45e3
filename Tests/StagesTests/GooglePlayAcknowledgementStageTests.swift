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

/// A Google Play subscription through the verifier, the granter and the finisher, on the in-memory repository, the
/// Android Publisher API played by the stand-in over real HTTP: Google requires acknowledging only a subscription's first
/// purchase, so its signup is acknowledged once and a renewal (a later order of the same token, read acknowledged at
/// verification) is finished without calling `:acknowledge` again.
@Suite struct GooglePlayAcknowledgementStageTests {
    static let package: PackageName = "com.example.coins"

    @Test func aRenewalIsNotAcknowledgedAgain() async throws {
        let api = try GooglePlayAPIStandIn(purchases: [:])
        let start = Date().addingTimeInterval(-60)
        func period(_ order: TransactionID, days: Double, acknowledged: Bool) -> GooglePlayAPIStandIn.Subscription {
            .init(packageName: Self.package, productId: "pass.monthly", latestOrderId: order, startTime: start,
                  expiryTime: Date().addingTimeInterval(days * 86_400), acknowledged: acknowledged)
        }
        api.set("sub-a", period("GPA.7777..0", days: 30, acknowledged: false))
        let signer = try GooglePlaySigner()
        let key = try PublicKey(subjectPublicKeyInfo: Data(try signer.publicKeyBase64().utf8))
        let client = AndroidPublisherClient(configuration: .init(baseURL: api.baseURL),
                                            serviceAccount: try GoogleServiceAccount(keyFile: Data(try api.serviceAccountKeyJSON().utf8)))
        let context = StageContext(codec: StageFixtures.codec, logger: Logger(stage: "t", minimum: .error))
        let store = InMemoryPurchaseStore()
        let verifier = VerifierStage(context: context, store: store,
                                     stores: StoreVerifiers(googlePlay: GooglePlayVerifier(configuration: .init(apps: [Self.package: key]), api: client)),
                                     // The catalog says which products are subscriptions (read through `subscriptionsv2`).
                                     apps: AppDirectory(unnamed: .init(id: AppDirectory.unnamedAppID, googlePlayPackages: [Self.package],
                                                                       catalog: StageFixtures.catalog)))
        let granter = GranterStage(context: context, store: store, catalog: StageFixtures.catalog, clawBackDueRefunds: false)
        let finisher = FinisherStage(context: context, store: store, appStoreAPI: nil, googlePlay: client)
        /// Verifies, grants and finishes what `event` leads to: how each granted purchase was finished.
        func pipeline(_ event: some PipelineEvent) async throws -> [TransactionFinished.Method] {
            var finished: [TransactionFinished.Method] = []
            let verified = StageFixtures.published(try await verifier.handle(try StageFixtures.message(event)), as: PurchaseVerifiedEvent.self)
            for purchase in verified {
                // Acknowledged is not consumed: `purchase.verified` says only what the app did.
                #expect(purchase.consumed != true, "\(purchase.transactionId) announced consumed")
                let granted = StageFixtures.published(try await granter.handle(try StageFixtures.message(purchase)), as: ItemGranted.self)
                for grant in granted {
                    finished += StageFixtures.published(try await finisher.handle(try StageFixtures.message(grant)), as: TransactionFinished.self).map(\.method)
                }
            }
            return finished
        }
        func acknowledgeCalls() -> Int { api.requests.filter { $0.hasPrefix("POST ") && $0.hasSuffix("/tokens/sub-a:acknowledge") }.count }

        let signed = try signer.sign(packageName: Self.package.rawValue, productId: "pass.monthly", purchaseToken: "sub-a", orderId: "GPA.7777..0")
        let signup = PurchaseSubmitted(store: .googleplay, kind: .googlePlayPurchase,
                                       googleplay: .init(packageName: Self.package, productId: "pass.monthly", purchaseToken: "sub-a",
                                                         purchaseData: signed.purchaseData, signature: signed.signature),
                                       userId: "android-a", submittedAt: Date(), source: .client)
        #expect(try await pipeline(signup) == [.googlePlayAPI])
        #expect(acknowledgeCalls() == 1 && api.subscriptionAcknowledgeCount("sub-a") == 1, "the signup is acknowledged")

        // Renewed: a new order of the same token, which Google holds acknowledged; only a notification tells of it.
        api.set("sub-a", period("GPA.7777..1", days: 60, acknowledged: true))
        let text = GooglePlayPushSigner.notification(package: Self.package.rawValue, "subscriptionNotification",
                                                     ["version": .string("1.0"), "notificationType": .integer(2), "purchaseToken": .string("sub-a"),
                                                      "subscriptionId": .string("pass.monthly")])
        #expect(try await pipeline(StoreNotificationReceived(developerNotification: text, purchaseToken: "sub-a", receivedAt: Date())) == [.googlePlayAPI])
        #expect(try await store.purchase(PurchaseKey(store: .googleplay, transactionId: "GPA.7777..1"))?.state == .finished)
        #expect(acknowledgeCalls() == 1, "the renewal is not acknowledged again: \(api.requests.filter { $0.hasPrefix("POST ") })")
    }
}

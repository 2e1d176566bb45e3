import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import StoreFixtures
import StoreVerification
import Testing
import TestSupport
import WorkerApp
import WorkerRuntime

/// The store is the source of truth: what its webhook never delivered is read from its history by the sweeper's
/// reconciler, assembled as `iap-sweeper` assembles it, and settled through the broker by the same stages, once.
extension PipelineTests {
    @Test(arguments: StoreEngine.available)
    func aRefundTheWebhookNeverDeliveredIsRecoveredFromTheStoresHistoryOnce(_ engine: StoreEngine) async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await engine.freshURL())
        let signer = JWSSigner(pki: pki)
        let bought = Date().addingTimeInterval(-2 * 3600)
        func transaction(_ id: String, refunded: Date? = nil) throws -> String {
            try signer.sign(AppStorePayloads.transaction(transactionId: id, productId: "coins.100", bundleId: Self.bundle, purchaseDate: bought,
                                                         revocationDate: refunded))
        }
        try await send([try submission(pipeline, try transaction("9100001"), user: "lost-refund"),
                        try submission(pipeline, try transaction("9100002"), user: "delivered-refund")], servers: servers)
        try await waitUntil("both purchases finished") { try await pipeline.store.statistics().purchasesByState[.finished] == 2 }

        // Two refunds half an hour ago: one the webhook delivered, one that never reached the ingest. The store lists both.
        let refundedAt = Date().addingTimeInterval(-1800)
        func refund(_ id: String) throws -> String {
            try signer.sign(AppStorePayloads.notification(type: .refund, bundleId: Self.bundle, appAppleId: nil,
                                                          signedTransactionInfo: try transaction(id, refunded: refundedAt), signedDate: refundedAt))
        }
        let (lost, delivered) = (try refund("9100001"), try refund("9100002"))
        pipeline.appStore.recordNotification(lost, at: refundedAt)
        pipeline.appStore.recordNotification(delivered, at: refundedAt.addingTimeInterval(1))
        try await send([try pipeline.codec.message(StoreNotificationReceived(signedPayload: delivered, receivedAt: Date()), time: Date())], servers: servers)
        func state(_ id: TransactionID) async throws -> PurchaseState? { try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: id))?.state }
        try await waitUntil("the delivered refund is settled") { try await state("9100002") == .revoked }
        #expect(try await pipeline.store.balances(of: "lost-refund") == ["coins": 100], "its refund never arrived")

        var variables = pipeline.variables
        variables["IAP_ENVIRONMENT"] = "Sandbox"
        let env = try WorkerApp.embedded(command: "iap-sweeper", settings: Workers.sweeperSettings, arguments: ["--kafka", "log_level=3"],
                                         variables: variables, store: pipeline.store)
        let reconciler = try #require(try Workers.sweeperServices(env).reconciler, "the App Store API is configured: it reconciles")
        let pass = try #require(try await reconciler.reconcileOnce()["Sandbox"])
        #expect(pass.completed && pass.listed == 2 && pass.recovered == 1, "only the lost one: \(pass)")
        try await waitUntil("the lost refund is settled") { try await state("9100001") == .revoked }
        #expect(try await pipeline.store.balances(of: "lost-refund") == ["coins": 0], "clawed back")

        let again = try #require(try await reconciler.reconcileOnce()["Sandbox"])
        #expect(again.listed == 2 && again.recovered == 0, "a second pass publishes nothing")
        try await pipeline.stop()
        #expect(pipeline.appStore.requests.filter { $0.hasPrefix("POST /inApps/v1/notifications/history") }.count == 2)
        #expect(try await pipeline.store.audit().balanceMismatches.isEmpty)
    }
}

import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StoreFixtures
import StoreVerification
import Testing
import TestSupport

/// CONSUMPTION_REQUEST through the broker: the verifier hands it on, the finisher answers the stand-in App Store
/// Server API (which checks the token and the body as Apple documents them) for users who consented, and
/// records why not for the others.
extension PipelineTests {
    @Test func aConsumptionRequestIsAnsweredWithConsentAndNotWithout() async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await StoreEngine.sqlite.freshURL())
        let signer = JWSSigner(pki: pki)
        let purchases: [(id: String, product: String, type: AppStoreProductType, user: UserID)] = [
            ("8500001", "coins.100", .consumable, "user-yes"),
            ("8500002", "coins.100", .consumable, "user-never-asked"),
            ("8500003", "adfree", .nonConsumable, "user-withdrew"),
            ("8500004", "adfree", .nonConsumable, "user-yes"),
        ]
        var signed: [String: String] = [:]
        for purchase in purchases {
            signed[purchase.id] = try signer.sign(AppStorePayloads.transaction(transactionId: purchase.id, productId: purchase.product, bundleId: Self.bundle,
                                                                               type: purchase.type))
        }
        signed["8599999"] = try signer.sign(AppStorePayloads.transaction(transactionId: "8599999", productId: "coins.100", bundleId: Self.bundle))
        try await send(try purchases.map { try submission(pipeline, signed[$0.id]!, user: $0.user) }, servers: servers)
        try await waitUntil("all four finished") { try await pipeline.store.statistics().purchasesByState[.finished] == 4 }

        // Consent: yes; a yes withdrawn later (sent in the wrong order: the later decision stands). The app reports the
        // first coins consumed (finishing with the App Store at the grant is not consumption).
        let now = Date()
        try await send([
            try pipeline.codec.message(PurchaseConsumed(store: .appstore, transactionId: "8500001", userId: "user-yes", consumedAt: now), time: now),
            try pipeline.codec.message(UserConsent(userId: "user-yes", consumptionData: true, decidedAt: now), time: now),
            try pipeline.codec.message(UserConsent(userId: "user-withdrew", consumptionData: false, decidedAt: now), time: now),
            try pipeline.codec.message(UserConsent(userId: "user-withdrew", consumptionData: true, decidedAt: now.addingTimeInterval(-60)), time: now),
        ], servers: servers)
        try await waitUntil("consents recorded") {
            try await pipeline.store.consumptionDataConsent(of: "user-yes") == true && pipeline.runners[2].counters.withLock { $0["handled", default: 0] } >= 8
        }
        #expect(try await pipeline.store.consumptionDataConsent(of: "user-withdrew") == false, "the later decision stands")

        func request(_ id: String, uuid: String, signedAt: Date = Date()) throws -> KafkaProducerMessage {
            let payload = AppStorePayloads.notification(type: .consumptionRequest, uuid: uuid, bundleId: Self.bundle, appAppleId: nil,
                                                        signedTransactionInfo: signed[id], signedDate: signedAt)
            return try pipeline.codec.message(StoreNotificationReceived(signedPayload: try signer.sign(payload), receivedAt: Date()), time: Date())
        }
        // Signed a little over a minute ago: past the finisher's wait for consent decisions still on their way.
        let signed61 = Date().addingTimeInterval(-61)
        let requests: [(id: String, uuid: String, signedAt: Date)] = [
            ("8500001", "c0000000-0000-4000-8000-000000000001", signed61), ("8500002", "c0000000-0000-4000-8000-000000000002", signed61),
            ("8500003", "c0000000-0000-4000-8000-000000000003", signed61), ("8599999", "c0000000-0000-4000-8000-000000000004", signed61),
            ("8500004", "c0000000-0000-4000-8000-000000000005", Date().addingTimeInterval(-13 * 3600)),
        ]
        try await send(try requests.map { try request($0.id, uuid: $0.uuid, signedAt: $0.signedAt) }, servers: servers)
        var answers: [String: ConsumptionAnswer] = [:]
        try await waitUntil("every request answered or recorded why not") {
            for request in requests where answers[request.id] == nil {
                let answer = try await pipeline.store.consumptionAnswer(notificationUUID: request.uuid)
                if answer?.outcome != ConsumptionAnswer.sending { answers[request.id] = answer } // claimed, not answered yet
            }
            return answers.count == requests.count
        }
        // Apple retries a notification: the same request is answered once.
        try await send([try request("8500001", uuid: requests[0].uuid, signedAt: signed61)], servers: servers)
        try await waitUntil("the retry handled") { pipeline.runners[2].counters.withLock { $0["handled", default: 0] } >= 14 }
        try await pipeline.stop()

        #expect(answers.mapValues(\.outcome) == ["8500001": "sent", "8500002": "noConsent", "8500003": "consentWithdrawn", "8599999": "unknownPurchase",
                                                 "8500004": "pastDeadline"])
        let sent = pipeline.appStore.consumptions
        #expect(pipeline.appStore.requests.filter { $0.hasPrefix("PUT ") } == ["PUT /inApps/v2/transactions/consumption/8500001"], "only with consent, once")
        #expect(sent.first?.body == ["customerConsented": .bool(true), "deliveryStatus": .string("DELIVERED"), "sampleContentProvided": .bool(false),
                                     "consumptionPercentage": .integer(100_000)], "delivered, and reported consumed by the app")
    }
}

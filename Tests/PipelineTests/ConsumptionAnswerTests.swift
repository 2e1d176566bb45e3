import Crypto
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
import WorkerRuntime

/// The finisher's answer to each kind of consumption request, stage by stage (no broker): what it tells the
/// stand-in App Store Server API, and why it tells nothing.
extension StageRetryClassificationTests {
    struct AnsweringFinisher {
        let store: SQLPurchaseStore
        let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test")
        let appStore: AppStoreServerAPIStandIn
        let stage: FinisherStage
        let now = Date()

        init(failWith: Int? = nil, withAPI: Bool = true, consentGrace: TimeInterval = 0) async throws {
            store = try SQLPurchaseStore(url: "sqlite:" + FileManager.default.temporaryDirectory.appendingPathComponent("ca-\(UUID().uuidString).sqlite").path)
            _ = try await store.migrate()
            let key = try PrivateKey.generateP256()
            appStore = try AppStoreServerAPIStandIn(publicKey: try key.publicKey(), keyId: "K", issuerId: "I", bundleId: PipelineTests.bundle, failWith: failWith)
            let api = AppStoreServerAPIClient(configuration: .init(baseURL: appStore.baseURL, keyId: "K", issuerId: "I", bundleId: PipelineTests.bundleID,
                                                                   privateKey: key))
            let now = self.now
            stage = FinisherStage(context: StageContext(codec: codec, logger: Logger(stage: "t", minimum: .error), now: { now }), store: store,
                                  appStoreAPI: withAPI ? api : nil, consentGrace: consentGrace)
        }

        /// A purchase of `user` in `state` (verified, granted or finished), reported consumed or not.
        func purchase(_ id: TransactionID, _ product: ProductID, _ type: ProductType, user: UserID = "u", granted: Bool = true, consumed: Bool = false) async throws {
            let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: product, productType: type,
                                        quantity: 1, purchaseTime: now)
            _ = try await store.recordVerified(record, at: now)
            if granted { _ = try await store.grant(record.key, items: [type == .consumable ? .currency("coins", 100) : .entitlement("e")], at: now) }
            if consumed { try await store.recordConsumed(record.key, at: now) }
        }

        /// Handles a request for `id`; its outcome as recorded (or "retry" when it is to be retried).
        func request(_ id: TransactionID, ownership: String = "PURCHASED", requestedAt: Date? = nil) async throws -> String {
            let uuid = UUID().uuidString.lowercased()
            let requested = requestedAt ?? now.addingTimeInterval(-120)
            let event = ConsumptionRequested(store: .appstore, transactionId: id, ownershipType: ownership, notificationUUID: uuid, requestedAt: requested,
                                             answerBy: requested.addingTimeInterval(12 * 3600))
            let message = try codec.message(event, time: now)
            do {
                _ = try await stage.handle(KafkaMessage(topic: message.topic, partition: 0, offset: 0, key: message.key, value: message.value,
                                                        headers: message.headers))
            } catch where stage.isTransient(error) {
                return "retry"
            }
            return try await store.consumptionAnswer(notificationUUID: uuid)?.outcome ?? "unrecorded"
        }
    }

    @Test func eachRequestIsAnsweredAsTheStoreKnowsThePurchaseOrNotAtAllWithTheReason() async throws {
        let finisher = try await AnsweringFinisher()
        try await finisher.store.recordConsent(userId: "u", consumptionData: true, decidedAt: finisher.now.addingTimeInterval(-3600))
        try await finisher.purchase("1", "coins.100", .consumable, consumed: true)
        try await finisher.purchase("2", "coins.100", .consumable)
        try await finisher.purchase("3", "adfree", .nonConsumable)
        try await finisher.purchase("4", "coins.100", .consumable, granted: false)
        try await finisher.purchase("5", "pass.monthly", .autoRenewable)
        try await finisher.purchase("6", "coins.100", .consumable, user: "no-consent")
        for id: TransactionID in ["1", "2", "3", "4", "5"] { #expect(try await finisher.request(id) == "sent", "\(id)") }
        #expect(try await finisher.request("3", ownership: "FAMILY_SHARED") == "familyShared")
        #expect(try await finisher.request("6") == "noConsent")
        #expect(try await finisher.request("99") == "unknownPurchase")
        #expect(try await finisher.request("1", requestedAt: finisher.now.addingTimeInterval(-13 * 3600)) == "pastDeadline")

        let bodies = Dictionary(uniqueKeysWithValues: finisher.appStore.consumptions.map { ($0.transactionId, $0.body) })
        func expected(_ status: String, _ percentage: Int64?) -> [String: JSONValue] {
            var body: [String: JSONValue] = ["customerConsented": .bool(true), "deliveryStatus": .string(status), "sampleContentProvided": .bool(false)]
            body["consumptionPercentage"] = percentage.map(JSONValue.integer)
            return body
        }
        #expect(bodies["1"] == expected("DELIVERED", 100_000), "reported consumed by the app")
        #expect(bodies["2"] == expected("DELIVERED", 0), "delivered, never reported consumed")
        #expect(bodies["3"] == expected("DELIVERED", nil), "no share claimed for an entitlement")
        #expect(bodies["4"] == expected("UNDELIVERED_OTHER", 0), "verified, never granted")
        #expect(bodies["5"] == expected("DELIVERED", nil), "the API takes no share for a subscription")
        #expect(finisher.appStore.requests.count == 5, "nothing else reached the App Store: \(finisher.appStore.requests)")
    }

    @Test func withoutCredentialsARefusalOrAnOutageTheRequestIsRecordedOrRetried() async throws {
        let noAPI = try await AnsweringFinisher(withAPI: false)
        try await noAPI.store.recordConsent(userId: "u", consumptionData: true, decidedAt: noAPI.now)
        try await noAPI.purchase("1", "coins.100", .consumable)
        #expect(try await noAPI.request("1") == "noAPICredentials")

        let refused = try await AnsweringFinisher(failWith: 404)
        try await refused.store.recordConsent(userId: "u", consumptionData: true, decidedAt: refused.now)
        try await refused.purchase("1", "coins.100", .consumable)
        #expect(try await refused.request("1") == "refusedByStore")

        let down = try await AnsweringFinisher(failWith: 503)
        try await down.store.recordConsent(userId: "u", consumptionData: true, decidedAt: down.now)
        try await down.purchase("1", "coins.100", .consumable)
        #expect(try await down.request("1") == "retry", "retried on its partition until the deadline")

        let waiting = try await AnsweringFinisher(consentGrace: 60)
        try await waiting.purchase("1", "coins.100", .consumable)
        #expect(try await waiting.request("1", requestedAt: waiting.now) == "retry", "consent decisions still on their way are waited for")
        #expect(waiting.appStore.requests.isEmpty)
    }

    /// A finish the App Store answers 429 with `Retry-After` is retried no sooner than it asked (within a bound: a
    /// longer wait is the retry budget's and the parking's to handle); nothing is finished meanwhile, and the client
    /// makes no call before the time.
    @Test func aRateLimitedFinishIsRetriedNoSoonerThanTheAPIAsks() async throws {
        for asked in [30, 600] {
            let finisher = try await AnsweringFinisher()
            try await finisher.purchase("7", "coins.100", .consumable)
            let granted = ItemGranted(store: .appstore, transactionId: "7", userId: "u", productId: "coins.100", productType: "consumable", quantity: 1,
                                      items: [GrantedItem(kind: .currency, code: "coins", amount: 100)], alreadyGranted: false, grantedAt: finisher.now)
            let message = try finisher.codec.message(granted, time: finisher.now)
            let input = KafkaMessage(topic: message.topic, partition: 0, offset: 0, key: message.key, value: message.value, headers: message.headers)
            finisher.appStore.fail(.init(status: 429, times: 1, retryAfterSeconds: asked))
            let calling = ContinuousClock.now
            let error = await #expect(throws: TransientError.self) { try await finisher.stage.handle(input) }
            // Apple names the time from which it answers again: the wait is what is left of it when the answer is read.
            let wait = try #require(error?.retryAfter)
            #expect(wait <= .seconds(asked) && wait >= .seconds(asked) - (ContinuousClock.now - calling) - .milliseconds(10), "\(wait)")
            // No sooner than asked (what is left of it: a loaded machine may have used some up before this line), within the bound.
            let delay = Backoff.retryDelay(backoff: .milliseconds(200), after: try #require(error))
            #expect(delay >= min(wait, Backoff.maxRetryAfter) && delay <= max(.milliseconds(200), Backoff.maxRetryAfter), "\(delay)")
            // Redelivered before the time: no call is made, the wait left travels again.
            let held = await #expect(throws: TransientError.self) { try await finisher.stage.handle(input) }
            #expect(try #require(held?.retryAfter) <= wait && finisher.appStore.requests.count == 1, "no call before the time the API named")
            #expect(finisher.appStore.finished.isEmpty)
        }
        #expect(Backoff.retryDelay(backoff: .milliseconds(200), after: TransientError("no hint")) == .milliseconds(200))
    }

    /// A finisher killed after it finished a purchase in the store, before its event was acknowledged, is given the
    /// `item.granted` again: it publishes the same `transaction.finished` again (found missing for 12 AppCoins purchases
    /// of a chaos run), for a purchase finished at its grant — AppCoins reported consumed, an entitlement — as for one
    /// finished through the App Store's API.
    @Test func aGrantHandedAgainAfterItsFinishPublishesTheSameFinishedEventAgain() async throws {
        let finisher = try await AnsweringFinisher(withAPI: false)
        let cases: [(PurchaseKey, ProductType, storeConsumed: Bool, TransactionFinished.Method?)] = [
            (PurchaseKey(store: .appcoins, transactionId: "order-1"), .consumable, true, .storeReportedConsumed),
            (PurchaseKey(store: .appstore, transactionId: "8"), .nonConsumable, false, .entitlementGranted),
            (PurchaseKey(store: .appcoins, transactionId: "order-2"), .consumable, false, nil), // the app's consumption report finishes it
        ]
        for (key, type, storeConsumed, method) in cases {
            let record = PurchaseRecord(key: key, userId: "u", productId: "p", productType: type, quantity: 1, purchaseTime: finisher.now,
                                        packageName: key.store == .appcoins ? "com.example.coins" : nil, purchaseToken: key.store == .appcoins ? "t" : nil,
                                        storeConsumed: storeConsumed)
            _ = try await finisher.store.recordVerified(record, at: finisher.now)
            _ = try await finisher.store.grant(key, items: [type == .consumable ? .currency("coins", 100) : .entitlement("e")], at: finisher.now)
            let granted = ItemGranted(store: key.store, transactionId: key.transactionId, userId: "u", productId: "p", productType: type.rawValue,
                                      quantity: 1, items: [], alreadyGranted: false, grantedAt: finisher.now)
            let message = try finisher.codec.message(granted, time: finisher.now)
            let input = KafkaMessage(topic: message.topic, partition: 0, offset: 0, key: message.key, value: message.value, headers: message.headers)
            var published: [[String]] = []
            for _ in 0..<2 {
                guard case .publish(let outputs) = try await finisher.stage.handle(input) else { Issue.record("\(key): not published"); continue }
                published.append(outputs.compactMap { $0.headers.first { $0.key == "ce_id" }?.value.map { String(decoding: $0, as: UTF8.self) } })
            }
            let expected = method == nil ? [String]() : ["finished:\(key.store.rawValue):\(key.transactionId)"]
            #expect(published == [expected, expected], "\(key): the same event each time, or none when the app's report finishes it")
            #expect(try await finisher.store.purchase(key)?.state == (method == nil ? .granted : .finished))
        }
    }
}

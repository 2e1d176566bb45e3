import Crypto
import Foundation
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

/// Consumption reports that overtake the grant (the app and the pipeline run concurrently), stage by stage on both
/// engines, without a broker: the finisher records what a report says, finishes the purchase once it is granted,
/// and the sweeper never flags it.
@Suite struct EarlyConsumptionTests {
    /// A finisher at a fixed time, without App Store API credentials unless given (AppCoins, or App Store finishing on
    /// consumption).
    struct Finisher {
        let store: SQLPurchaseStore
        let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test")
        let now = Date()
        let stage: FinisherStage

        init(_ engine: StoreEngine, appStoreAPI: AppStoreServerAPIClient? = nil) async throws {
            store = try SQLPurchaseStore(url: try await engine.freshURL())
            _ = try await store.migrate()
            let now = self.now
            stage = FinisherStage(context: StageContext(codec: codec, logger: Logger(stage: "t", minimum: .error), now: { now }), store: store,
                                  appStoreAPI: appStoreAPI)
        }

        /// A consumable of `store` bought two hours ago, verified.
        func verified(_ store: Store, _ id: TransactionID) async throws -> PurchaseRecord {
            let record = PurchaseRecord(key: PurchaseKey(store: store, transactionId: id), userId: "u", productId: "coins.100", productType: .consumable,
                                        quantity: 1, purchaseTime: now.addingTimeInterval(-7200), packageName: store == .appcoins ? "com.example.coins" : nil,
                                        purchaseToken: store == .appcoins ? "token-\(id)" : nil)
            #expect(try await self.store.recordVerified(record, at: record.purchaseTime) == .recorded)
            return record
        }

        /// The app's report that `key` was consumed at `consumedAt`: what the finisher made of it.
        func consumed(_ key: PurchaseKey, at consumedAt: Date) async -> String {
            await outcome(PurchaseConsumed(store: key.store, transactionId: key.transactionId, userId: "u", consumedAt: consumedAt))
        }

        /// Grants `record` as the granter does, then hands its `item.granted` to the finisher: what it made of it.
        func granted(_ record: PurchaseRecord) async throws -> String {
            _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: now)
            return await outcome(ItemGranted(store: record.key.store, transactionId: record.key.transactionId, userId: "u", productId: record.productId,
                                             productType: "consumable", quantity: 1, items: [GrantedItem(kind: .currency, code: "coins", amount: 100)],
                                             alreadyGranted: false, grantedAt: now))
        }

        /// `finished <method>` for each `transaction.finished` published, `published 0`, `deadLetter <reason>`, or `retry`.
        func outcome(_ event: some PipelineEvent) async -> String {
            do {
                let message = try codec.message(event, time: now)
                switch try await stage.handle(KafkaMessage(topic: message.topic, partition: 0, offset: 0, key: message.key, value: message.value,
                                                           headers: message.headers)) {
                case .publish(let outputs) where outputs.isEmpty: return "published 0"
                case .publish(let outputs):
                    return outputs.map { output in
                        guard let value = output.value, case .success(let finished) = codec.decodeBody(value, as: TransactionFinished.self) else {
                            return "published other"
                        }
                        return "finished \(finished.method.rawValue)"
                    }.joined(separator: ", ")
                case .deadLetter(let reason, _): return "deadLetter \(reason)"
                case .recheck: return "recheck"
                }
            } catch {
                return stage.isTransient(error) ? "retry" : "error \(error)"
            }
        }
    }

    /// A report does not wait behind a grant of the user's parked while the store's API fails (`keepsOrder`): recorded at
    /// once, its purchase is known consumed by its deadline. The grants and the rest keep their order.
    @Test func consumptionReportsAloneKeepNoOrderBehindParkedMessages() async throws {
        let finisher = try await Finisher(.sqlite)
        func message(_ event: some PipelineEvent) throws -> KafkaMessage {
            let produced = try finisher.codec.message(event, time: finisher.now)
            return KafkaMessage(topic: produced.topic, partition: 0, offset: 0, key: produced.key, value: produced.value, headers: produced.headers)
        }
        #expect(!finisher.stage.keepsOrder(try message(PurchaseConsumed(store: .appstore, transactionId: "1", userId: "u", consumedAt: finisher.now))))
        #expect(finisher.stage.keepsOrder(try message(ItemGranted(store: .appstore, transactionId: "1", userId: "u", productId: "coins.100",
                                                                  productType: "consumable", quantity: 1, items: [], alreadyGranted: false,
                                                                  grantedAt: finisher.now))))
    }

    /// Reported consumed while only verified, longer ago than the finisher waits for a grant: the report is recorded,
    /// not dead-lettered, and the purchase is finished when its grant comes — not flagged at its deadline.
    @Test(arguments: StoreEngine.available)
    func aConsumptionReportedBeforeTheGrantFinishesThePurchaseAtItsGrant(_ engine: StoreEngine) async throws {
        let finisher = try await Finisher(engine)
        for store in [Store.appcoins, .appstore] {
            let record = try await finisher.verified(store, "early-\(store.rawValue)")
            let report = await finisher.consumed(record.key, at: finisher.now.addingTimeInterval(-3600))
            #expect(report == "published 0", "\(store): recorded for the grant, neither dead-lettered nor held on its partition")
            #expect(try await finisher.store.purchase(record.key)?.state == .verified, "\(store): never finished before its grant")
            let grant = try await finisher.granted(record)
            #expect(grant == "finished consumedByApp", "\(store): the grant finishes what the app consumed")
            #expect(try await finisher.store.purchase(record.key)?.state == .finished)
            #expect(await finisher.outcome(ItemGranted(store: store, transactionId: record.key.transactionId, userId: "u", productId: "coins.100",
                                                       quantity: 1, items: [], alreadyGranted: true, grantedAt: finisher.now)) == "finished consumedByApp",
                    "\(store): a repeat of the grant answers the same event again")
        }
        #expect(try await finisher.store.sweepDue(store: .appcoins, deadline: 86_400, now: finisher.now.addingTimeInterval(48 * 3600)).isEmpty)
        #expect(try await finisher.store.sweepDue(store: .appstore, deadline: 86_400, now: finisher.now.addingTimeInterval(48 * 3600)).isEmpty)
    }

    /// A report about a purchase not recorded yet (by however long: a verifier down for two days) is kept for its record:
    /// nothing waits on the partition, nothing is dead-lettered, and the purchase, once verified and granted, is finished as
    /// consumed and never flagged for refund. The first report stands; a purchase that will never be granted is
    /// dead-lettered at once.
    @Test(arguments: StoreEngine.available)
    func aReportOfAPurchaseNotRecordedYetIsKeptForItsRecord(_ engine: StoreEngine) async throws {
        let finisher = try await Finisher(engine)
        let twoDaysAgo = finisher.now.addingTimeInterval(-2 * 86_400)
        for store in [Store.appcoins, .appstore] {
            let key = PurchaseKey(store: store, transactionId: "unrecorded-\(store.rawValue)")
            #expect(await finisher.consumed(key, at: twoDaysAgo) == "published 0", "\(store): kept, not retried nor dead-lettered")
            #expect(await finisher.consumed(key, at: finisher.now) == "published 0", "\(store): a repeat")
            let record = try await finisher.verified(store, key.transactionId)
            let reported = try #require(try await finisher.store.appReportedConsumption(key), "\(store): the record took the report")
            #expect(abs(reported.timeIntervalSince(twoDaysAgo)) < 0.001, "\(store): the first report stands")
            #expect(try await finisher.granted(record) == "finished consumedByApp", "\(store): the grant finishes what the app consumed")
        }
        #expect(try await finisher.store.sweepDue(store: .appcoins, deadline: 86_400, now: finisher.now.addingTimeInterval(48 * 3600)).isEmpty)
        #expect(try await finisher.store.sweepDue(store: .appstore, deadline: 86_400, now: finisher.now.addingTimeInterval(48 * 3600)).isEmpty)
        let rejected = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "rejected-1"), userId: "u", productId: "coins.100",
                                      productType: .consumable, quantity: 1, purchaseTime: finisher.now)
        _ = try await finisher.store.recordRejected(rejected, reason: "untrustedChain", at: finisher.now)
        #expect(await finisher.consumed(rejected.key, at: finisher.now) == "deadLetter notGranted", "never to be granted")
    }

    /// In a batch (as the finisher consumes), reports of purchases not recorded yet, in any key order, are kept for their
    /// records like a report alone: the batch reads (and locks) their purchases ahead in key order, as a verifier's batch does.
    @Test(arguments: StoreEngine.available)
    func reportsInABatchAreKeptForTheirRecords(_ engine: StoreEngine) async throws {
        let finisher = try await Finisher(engine)
        let keys = ["batch-2", "batch-1", "batch-3"].map { PurchaseKey(store: .appcoins, transactionId: $0) }
        let messages = try keys.enumerated().map { offset, key in
            let message = try finisher.codec.message(PurchaseConsumed(store: key.store, transactionId: key.transactionId, userId: "u", consumedAt: finisher.now),
                                                     time: finisher.now)
            return KafkaMessage(topic: message.topic, partition: 0, offset: Int64(offset), key: message.key, value: message.value, headers: message.headers)
        }
        let results = await finisher.stage.handle(batch: messages)
        #expect(results.count == keys.count)
        for result in results {
            guard case .success(.publish(let outputs)) = result else { Issue.record("\(result)"); continue }
            #expect(outputs.isEmpty)
        }
        for key in keys {
            let record = try await finisher.verified(.appcoins, key.transactionId)
            #expect(try await finisher.granted(record) == "finished consumedByApp", "\(key.transactionId)")
        }
    }

    /// With App Store Server API credentials a purchase is finished through Finish Transaction at its grant. A consumption
    /// report that comes while that call is failing is recorded and does not finish the purchase: finished by the report,
    /// it would never be finished with the store. The grant's retry, once the store answers, finishes it; a report that
    /// overtakes the grant is recorded, and the grant's call finishes the purchase.
    @Test(arguments: StoreEngine.available)
    func aReportWhileFinishTransactionFailsLeavesTheFinishingToTheCall(_ engine: StoreEngine) async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try AppStoreServerAPIStandIn(publicKey: try key.publicKey(), keyId: "K", issuerId: "I", bundleId: PipelineTests.bundle)
        let api = AppStoreServerAPIClient(configuration: .init(baseURL: appStore.baseURL, keyId: "K", issuerId: "I", bundleId: PipelineTests.bundleID,
                                                               privateKey: key))
        let finisher = try await Finisher(engine, appStoreAPI: api)
        let record = try await finisher.verified(.appstore, "2000000000000001")
        appStore.fail(.init(status: 503))
        let first = try await finisher.granted(record)
        #expect(first == "retry", "the store is unavailable: the grant's finish is retried")
        #expect(await finisher.consumed(record.key, at: finisher.now) == "published 0")
        #expect(try await finisher.store.purchase(record.key)?.state == .granted, "not finished before the store was told")
        #expect(appStore.finished.isEmpty)

        appStore.fail(nil)
        #expect(await finisher.outcome(ItemGranted(store: .appstore, transactionId: record.key.transactionId, userId: "u", productId: "coins.100",
                                                   quantity: 1, items: [], alreadyGranted: true, grantedAt: finisher.now)) == "finished appStoreServerAPI")
        #expect(appStore.finished == [record.key.transactionId])
        #expect(try await finisher.store.purchase(record.key)?.state == .finished)
        #expect(await finisher.consumed(record.key, at: finisher.now) == "finished consumedByApp", "finished: the same event again")

        // Reported before its grant: recorded, and finished through the call at the grant.
        let early = try await finisher.verified(.appstore, "2000000000000002")
        #expect(await finisher.consumed(early.key, at: finisher.now) == "published 0")
        #expect(try await finisher.granted(early) == "finished appStoreServerAPI")
        #expect(appStore.finished == [record.key.transactionId, early.key.transactionId])
        // Reported before its verification: kept for its record, and finished through the call at the grant too.
        let unrecorded = PurchaseKey(store: .appstore, transactionId: "2000000000000003")
        #expect(await finisher.consumed(unrecorded, at: finisher.now) == "published 0", "not recorded yet: kept for its record")
        #expect(try await finisher.granted(try await finisher.verified(.appstore, unrecorded.transactionId)) == "finished appStoreServerAPI")
        #expect(appStore.finished == [record.key.transactionId, early.key.transactionId, unrecorded.transactionId])
    }
}

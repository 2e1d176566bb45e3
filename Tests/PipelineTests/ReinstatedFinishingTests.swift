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

/// A purchase refunded before its grant and then reinstated (REFUND_REVERSED) is granted and set `finished` by the
/// granter at once, though nobody finished it with the App Store: the finisher makes its Finish Transaction call when the
/// re-grant's `item.granted` comes, alone and in a batch, before it says `transaction.finished`.
@Suite struct ReinstatedFinishingTests {
    @Test(arguments: StoreEngine.available) func aPurchaseReinstatedBeforeItsGrantIsFinishedWithTheStore(_ engine: StoreEngine) async throws {
        let fixture = try await FinisherFixture(engine)
        let (store, now, api) = (fixture.store, fixture.now, fixture.production)
        /// Verified, refunded before its grant, the refund reversed: the re-grant's `item.granted`.
        func reinstated(_ id: TransactionID, offset: Int64) async throws -> KafkaMessage {
            let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: "u", productId: "coins.100", productType: .consumable,
                                        quantity: 1, purchaseTime: now, environment: AppStoreEnvironment.production.rawValue)
            #expect(try await store.recordVerified(record, at: now) == .recorded)
            _ = try await store.revoke(record.key, at: now)
            let outcome = try await store.reinstate(record.key, items: [.currency("coins", 100)], at: now)
            if case .reinstated = outcome {} else { Issue.record("\(id): \(outcome)") }
            #expect(try await store.states(of: [record.key])[record.key] == .finished)
            return try fixture.message(ItemGranted(store: .appstore, transactionId: id, userId: "u", productId: "coins.100", productType: "consumable",
                                                   quantity: 1, items: [GrantedItem(kind: .currency, code: "coins", amount: 100)],
                                                   alreadyGranted: false, reinstated: true, grantedAt: now), offset: offset)
        }
        func expectFinishedEvent(_ result: StageResult) {
            guard case .publish(let outputs) = result, outputs.count == 1 else { Issue.record("\(result)"); return }
            #expect(outputs[0].topic == fixture.codec.topic(.transactionFinished))
        }
        // Alone.
        expectFinishedEvent(try await fixture.stage.handle(try await reinstated("9201", offset: 0)))
        #expect(api.finished == ["9201"])
        // In a batch, beside a purchase granted the usual way.
        let batch = [try await reinstated("9202", offset: 1), try await fixture.granted("9203", offset: 2)]
        for result in await fixture.stage.handle(batch: batch) {
            guard case .success(let answer) = result else { Issue.record("\(result)"); continue }
            expectFinishedEvent(answer)
        }
        #expect(api.finished.sorted() == ["9201", "9202", "9203"])
    }
}

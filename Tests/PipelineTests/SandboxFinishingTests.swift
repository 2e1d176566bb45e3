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

/// A production deployment that accepts App Review's sandbox purchases finishes each purchase with the API of the
/// environment it was verified in: the sandbox's for Sandbox, alone and in a batch. Without a sandbox API, every purchase
/// goes to the one configured, as before.
@Suite struct SandboxFinishingTests {
    @Test(arguments: StoreEngine.available) func aSandboxPurchaseIsFinishedWithTheSandboxAPI(_ engine: StoreEngine) async throws {
        let fixture = try await FinisherFixture(engine, withSandbox: true)
        let (stage, store, now, production) = (fixture.stage, fixture.store, fixture.now, fixture.production)
        let sandbox = try #require(fixture.sandbox)
        // Alone.
        _ = try await stage.handle(try await fixture.granted("9101", .production, offset: 0))
        _ = try await stage.handle(try await fixture.granted("9102", .sandbox, offset: 1))
        // In a batch.
        let batch = [try await fixture.granted("9103", .sandbox, offset: 2), try await fixture.granted("9104", .production, offset: 3)]
        for result in await stage.handle(batch: batch) {
            guard case .success(.publish(let outputs)) = result else { Issue.record("\(result)"); continue }
            #expect(outputs.count == 1, "transaction.finished")
        }
        #expect(production.finished.sorted() == ["9101", "9104"])
        #expect(sandbox.finished.sorted() == ["9102", "9103"])
        let states = try await store.states(of: ["9101", "9102", "9103", "9104"].map { PurchaseKey(store: .appstore, transactionId: $0) })
        #expect(Set(states.values) == [.finished])

        // Consumption requests are answered with the API of the purchase's environment too.
        try await store.recordConsent(userId: "u", consumptionData: true, decidedAt: now.addingTimeInterval(-3600))
        for id: TransactionID in ["9101", "9102"] {
            let requested = ConsumptionRequested(store: .appstore, transactionId: id, ownershipType: "PURCHASED", notificationUUID: UUID().uuidString.lowercased(),
                                                 requestedAt: now.addingTimeInterval(-60), answerBy: now.addingTimeInterval(12 * 3600))
            _ = try await stage.handle(try fixture.message(requested, offset: 4))
        }
        #expect(production.consumptions.map(\.transactionId) == ["9101"])
        #expect(sandbox.consumptions.map(\.transactionId) == ["9102"])
    }

    /// Half configured (the verifier accepts sandbox purchases, the finisher has production's API alone): production's API
    /// does not know a sandbox purchase, and the dead letter says which setting is missing.
    @Test func aSandboxPurchaseRefusedByTheOnlyAPINamesTheMissingSetting() async throws {
        let fixture = try await FinisherFixture(.sqlite, failing: .init(status: 404))
        let result = try await fixture.stage.handle(try await fixture.granted("9201", .sandbox))
        guard case .deadLetter(let reason, let detail) = result else { Issue.record("\(result)"); return }
        #expect(reason == "storeRefusedFinish")
        #expect(detail.contains("--appstore-sandbox-api-url"), "\(detail)")
    }
}


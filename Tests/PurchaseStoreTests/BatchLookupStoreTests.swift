import Foundation
import PurchaseDomain
import PurchaseStore
import Testing
import TestSupport

/// The lookups a batch makes in one statement (per 256 keys), on both engines: each key answered, none invented.
@Suite struct BatchLookupStoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)

    func freshStore(_ engine: StoreEngine) async throws -> SQLPurchaseStore {
        let store = try SQLPurchaseStore(url: try await engine.freshURL())
        try await store.migrate()
        return store
    }

    /// 300 keys: more than one group, the last one padded. Every third is recorded, every sixth of those granted too.
    @Test(arguments: StoreEngine.available) func statesOfManyKeysAnswerEachRecordedKeyAndNoOther(_ engine: StoreEngine) async throws {
        let store = try await freshStore(engine)
        let keys = (0..<300).map { PurchaseKey(store: .appstore, transactionId: "7\($0)") }
        var expected: [PurchaseKey: PurchaseState] = [:]
        for (index, key) in keys.enumerated() where index % 3 == 0 {
            let record = PurchaseRecord(key: key, userId: "user-\(index % 7)", productId: "coins.100", productType: .consumable, quantity: 1, purchaseTime: Self.t0)
            #expect(try await store.recordVerified(record, at: Self.t0) == .recorded)
            expected[key] = .verified
            if index % 6 == 0 {
                _ = try await store.grant(key, items: [.currency("coins", 100)], at: Self.t0)
                expected[key] = .granted
            }
        }
        // An AppCoins purchase with the same transaction id is another purchase.
        #expect(try await store.states(of: keys + [PurchaseKey(store: .appcoins, transactionId: "70")]) == expected)
        #expect(try await store.states(of: Array(keys.prefix(5))) == expected.filter { keys.prefix(5).contains($0.key) })
        #expect(try await store.states(of: []) == [:])
    }

    @Test(arguments: StoreEngine.available) func parkedKeysAmongManyAnswerOnlyTheStagesParkedKeys(_ engine: StoreEngine) async throws {
        let store = try await freshStore(engine)
        let keys = Set((0..<300).map { "user-\($0)" })
        for index in [0, 17, 255, 256, 299] {
            try await store.recordParked(stage: "granter", topic: "iap.purchase.verified", partition: 0, offset: Int64(index), key: "user-\(index)",
                                         recheck: false, token: "t\(index)", reason: "test", at: Self.t0)
        }
        try await store.recordParked(stage: "finisher", topic: "iap.item.granted", partition: 0, offset: 1, key: "user-5", recheck: false, token: "f",
                                     reason: "test", at: Self.t0)
        #expect(try await store.parkedKeys(stage: "granter", among: keys) == ["user-0", "user-17", "user-255", "user-256", "user-299"])
        #expect(try await store.parkedKeys(stage: "finisher", among: keys) == ["user-5"])
        #expect(try await store.parkedKeys(stage: "granter", among: ["user-1", "user-2", "user-3"]) == [])
    }
}

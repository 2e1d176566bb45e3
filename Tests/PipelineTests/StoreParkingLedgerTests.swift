import Foundation
import PurchaseStore
import Testing
import TestSupport
import WorkerApp
import WorkerRuntime

/// The parking ledger in the store's database, on both engines: each key looked up by its bytes, one statement per batch
/// of keys (per 256 on SQLite), each stage's parked messages apart from the others'.
@Suite struct StoreParkingLedgerTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)

    func ledger(_ engine: StoreEngine) async throws -> StoreParkingLedger {
        StoreParkingLedger(store: try await ByteIdentityStageTests.freshStore(engine))
    }

    func park(_ ledger: StoreParkingLedger, stage: String, topic: String = "t", offset: Int64, key: OrderingKey, recheck: Bool = false) async throws {
        try await ledger.recordParked(ParkedOrigin(stage: stage, topic: topic, partition: 0, offset: offset), key: key, recheck: recheck,
                                      token: "t\(offset)", reason: "test", at: Self.t0)
    }

    /// Keys travel to PostgreSQL inside array literals: quotes, backslashes and the word NULL are text like any other.
    @Test(arguments: StoreEngine.available) func keysWithArraySyntaxInThemAreLookedUpAsTheyAre(_ engine: StoreEngine) async throws {
        let ledger = try await ledger(engine)
        try await park(ledger, stage: "granter", offset: 0, key: "x\"y\\")
        #expect(try await ledger.parkedKeys(stage: "granter", among: ["x\"y\\", "x\"y", "NULL"]) == ["x\"y\\"])
    }

    @Test(arguments: StoreEngine.available) func parkedKeysAmongManyAnswerOnlyTheStagesParkedKeys(_ engine: StoreEngine) async throws {
        let ledger = try await ledger(engine)
        let keys = Set((0..<300).map { OrderingKey("user-\($0)") })
        for index in [0, 17, 255, 256, 299] {
            try await park(ledger, stage: "granter", topic: "iap.purchase.verified", offset: Int64(index), key: OrderingKey("user-\(index)"))
        }
        try await park(ledger, stage: "finisher", topic: "iap.item.granted", offset: 1, key: "user-5")
        #expect(try await ledger.parkedKeys(stage: "granter", among: keys) == ["user-0", "user-17", "user-255", "user-256", "user-299"])
        #expect(try await ledger.parkedKeys(stage: "finisher", among: keys) == ["user-5"])
        #expect(try await ledger.parkedKeys(stage: "granter", among: ["user-1", "user-2", "user-3"]) == [])
    }

    /// A message parked again keeps its place and takes the new record's token; released, it is gone and its key free.
    @Test(arguments: StoreEngine.available) func aMessageParkedAgainKeepsItsPlaceUntilReleased(_ engine: StoreEngine) async throws {
        let ledger = try await ledger(engine)
        let first = ParkedOrigin(stage: "granter", topic: "t", partition: 0, offset: 7), second = ParkedOrigin(stage: "granter", topic: "t", partition: 0, offset: 9)
        try await ledger.recordParked(first, key: "user-1", recheck: false, token: "a", reason: "test", at: Self.t0)
        try await ledger.recordParked(second, key: "user-1", recheck: false, token: "b", reason: "test", at: Self.t0.addingTimeInterval(1))
        try await ledger.recordParked(first, key: "user-1", recheck: false, token: "c", reason: "again", at: Self.t0.addingTimeInterval(2))
        #expect(try await ledger.parked(stage: "granter", key: "user-1") == [first, second])
        #expect(try await ledger.parkedToken(first) == "c")
        let byStage = try await ledger.parkedByStage()
        #expect(byStage["granter"]?.count == 2 && byStage["granter"]?.oldest == Self.t0)
        try await ledger.releaseParked(first)
        #expect(try await ledger.parkedToken(first) == nil)
        #expect(try await ledger.parked(stage: "granter", key: "user-1") == [second])
        try await ledger.releaseParked(second)
        #expect(try await ledger.parkedKeys(stage: "granter", among: ["user-1"]).isEmpty)
        #expect(try await ledger.parkedByStage().isEmpty)
    }
}

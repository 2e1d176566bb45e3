import Foundation
import PurchaseStore
import WorkerRuntime

/// The runners' parking ledger, kept in the purchase store so that every replica of a stage sees what was parked.
public struct StoreParkingLedger: ParkingLedger {
    let store: SQLPurchaseStore

    public init(store: SQLPurchaseStore) { self.store = store }

    public func recordParked(_ origin: ParkedOrigin, key: OrderingKey?, recheck: Bool, token: String, reason: String, at: Date) async throws {
        try await store.recordParked(stage: origin.stage, topic: origin.topic, partition: origin.partition, offset: origin.offset,
                                     key: key?.rawValue, recheck: recheck, token: token, reason: reason, at: at)
    }

    public func parked(stage: String, key: OrderingKey) async throws -> [ParkedOrigin] {
        try await store.parkedMessages(stage: stage, key: key.rawValue).map {
            ParkedOrigin(stage: stage, topic: $0.topic, partition: $0.partition, offset: $0.offset)
        }
    }

    public func parkedKeys(stage: String, among keys: Set<OrderingKey>) async throws -> Set<OrderingKey> {
        Set(try await store.parkedKeys(stage: stage, among: keys.sorted().map(\.rawValue)).map { OrderingKey($0) })
    }

    public func parkedToken(_ origin: ParkedOrigin) async throws -> String? {
        try await store.parkedToken(stage: origin.stage, topic: origin.topic, partition: origin.partition, offset: origin.offset)
    }

    public func releaseParked(_ origin: ParkedOrigin) async throws {
        try await store.releaseParked(stage: origin.stage, topic: origin.topic, partition: origin.partition, offset: origin.offset)
    }
}

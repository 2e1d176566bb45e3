import Foundation
import PurchaseDomain

/// The rejections kept for the users' histories, as `SQLPurchaseStore+Rejections` keeps them (times in whole milliseconds).
extension InMemoryPurchaseStore {
    public func recordRejections(_ rejections: [RejectionRecord]) async throws {
        try await withTables { tables in
            for var rejection in rejections where !tables.rejections.contains(where: { $0.userId == rejection.userId && $0.causeID == rejection.causeID }) {
                rejection.rejectedAt = Date(milliseconds: rejection.rejectedAt.milliseconds)
                tables.rejections.append(rejection)
            }
        }
    }

    public func pruneRejections(before: Date, limit: Int) async throws -> Int {
        try await withTables { tables in
            let old = Set(tables.rejections.indices.filter { tables.rejections[$0].rejectedAt.milliseconds < before.milliseconds }
                .sorted { tables.rejections[$0].rejectedAt < tables.rejections[$1].rejectedAt }.prefix(max(1, limit)))
            tables.rejections = tables.rejections.indices.filter { !old.contains($0) }.map { tables.rejections[$0] }
            return old.count
        }
    }

    /// The rejections kept for `userId`, in the order they were kept.
    public func rejections(of userId: UserID) async throws -> [RejectionRecord] {
        try await withTables { tables in tables.rejections.filter { $0.userId == userId } }
    }
}

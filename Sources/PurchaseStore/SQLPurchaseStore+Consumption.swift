import Database
import Foundation
import PurchaseDomain

/// Consent to share consumption data, and the answers to the store's consumption requests.
extension SQLPurchaseStore {
    /// Records `userId`'s answer decided at `decidedAt`, unless a later decision is recorded already (events may
    /// arrive out of order). Returns whether it now stands.
    @discardableResult
    public func recordConsent(userId: String, consumptionData: Bool, decidedAt: Date) async throws -> Bool {
        try await executor.run { connection in
            try connection.query("""
                INSERT INTO consents (user_id, consumption_data, decided_at) VALUES ($1, $2, $3)
                ON CONFLICT (user_id) DO UPDATE SET consumption_data = excluded.consumption_data, decided_at = excluded.decided_at
                WHERE consents.decided_at < excluded.decided_at
                """, [.text(userId), .integer(consumptionData ? 1 : 0), .integer(PurchaseTime.milliseconds(decidedAt))])
            let row = try connection.query("SELECT consumption_data, decided_at FROM consents WHERE user_id = $1", [.text(userId)]).first
            return row?[0].int64 == (consumptionData ? 1 : 0) && row?[1].int64 == PurchaseTime.milliseconds(decidedAt)
        }
    }

    /// `userId`'s standing answer: nil when never asked.
    public func consumptionDataConsent(of userId: String) async throws -> Bool? {
        try await executor.run { connection in
            try connection.query("SELECT consumption_data FROM consents WHERE user_id = $1", [.text(userId)]).first?[0].int64.map { $0 == 1 }
        }
    }

    /// How the consumption request `notificationUUID` was answered (or why not), if it was.
    public func consumptionAnswer(notificationUUID: String) async throws -> ConsumptionAnswer? {
        try await executor.run { connection in
            try connection.query("SELECT outcome, detail, answered_at FROM consumption_answers WHERE notification_uuid = $1",
                                 [.text(notificationUUID)]).first.flatMap { row in
                guard let outcome = row[0].string, let at = row[2].int64 else { return nil }
                return ConsumptionAnswer(outcome: outcome, detail: row[1].string, answeredAt: PurchaseTime.date(at))
            }
        }
    }

    /// Records how the consumption request `notificationUUID` about `key` was answered; the first record stands.
    public func recordConsumptionAnswer(_ key: PurchaseKey, notificationUUID: String, outcome: String, detail: String?, at now: Date) async throws {
        _ = try await executor.run { connection in
            try connection.query("""
                INSERT INTO consumption_answers (notification_uuid, store, transaction_id, outcome, detail, answered_at) VALUES ($1, $2, $3, $4, $5, $6)
                ON CONFLICT (notification_uuid) DO NOTHING
                """, [.text(notificationUUID), .text(key.store.rawValue), .text(key.transactionId), .text(outcome), detail.map(SQLValue.text) ?? .null,
                      .integer(PurchaseTime.milliseconds(now))])
        }
    }
}

/// What became of one consumption request: `sent`, or why not (`noConsent`, `unknownPurchase`, …).
public struct ConsumptionAnswer: Sendable, Hashable {
    public var outcome: String
    public var detail: String?
    public var answeredAt: Date
}

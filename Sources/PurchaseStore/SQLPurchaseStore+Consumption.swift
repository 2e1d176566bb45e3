import Database
import Foundation
import PurchaseDomain

/// What the store knows about consumption: the app's reports, each user's consent to share consumption data,
/// and the answers to the store's consumption requests.
extension SQLPurchaseStore {
    /// The app reported `key` consumed at `at` (the first report stands). A purchase not recorded yet keeps the report
    /// until it is (`earlyConsumption`): reports overtake verification, by as long as a verifier is behind or down.
    @discardableResult
    public func recordConsumed(_ key: PurchaseKey, at: Date) async throws -> ConsumptionReport {
        let dialect = dialect
        let values: [SQLValue] = [.text(key.store.rawValue), .text(key.transactionId), .integer(PurchaseTime.milliseconds(at))]
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                let setConsumed = "UPDATE purchases SET consumed_at = $3 WHERE store = $1 AND transaction_id = $2 AND consumed_at IS NULL"
                try connection.query(setConsumed, values)
                if connection.changes == 1 { return .withItsPurchase }
                // Not recorded, or reported before: the purchase's lock (a batch recording it holds it until it commits), then
                // look again.
                try Self.lockKeys(connection, [key], dialect)
                if try !connection.query("SELECT 1 FROM purchases WHERE store = $1 AND transaction_id = $2", Array(values.prefix(2))).isEmpty {
                    try connection.query(setConsumed, values)
                    return .withItsPurchase
                }
                try connection.query("""
                    INSERT INTO early_consumption (store, transaction_id, consumed_at) VALUES ($1, $2, $3) ON CONFLICT (store, transaction_id) DO NOTHING
                    """, values)
                return .beforeItsPurchase
            }
        }
    }

    /// Forgets the kept reports (`recordConsumed`) whose purchase is recorded: its record took the report when it was
    /// inserted (under the purchase's lock, which the report was kept under too). Returns how many.
    @discardableResult
    public func pruneTakenConsumptionReports() async throws -> Int {
        try await executor.run { connection in
            try connection.query("""
                DELETE FROM early_consumption
                WHERE EXISTS (SELECT 1 FROM purchases p WHERE p.store = early_consumption.store AND p.transaction_id = early_consumption.transaction_id)
                """)
            return connection.changes
        }
    }

    /// When the app reported `key` consumed (`recordConsumed`): nil when it did not, or the purchase is not recorded. In a
    /// batch it keeps what the batch read ahead: it reads no column the batch's decisions change.
    public func appReportedConsumption(_ key: PurchaseKey) async throws -> Date? {
        let executor = executor
        return try await executor.run(usingReadAhead: true) { connection in
            try executor.flushDeferred(of: key, connection)
            return try connection.query("SELECT consumed_at FROM purchases WHERE store = $1 AND transaction_id = $2",
                                        [.text(key.store.rawValue), .text(key.transactionId)]).first?[0].int64.map(PurchaseTime.date)
        }
    }

    /// What a consumption answer says about `key`: nil when the store has no record of it.
    public func consumptionFacts(_ key: PurchaseKey) async throws -> ConsumptionFacts? {
        try await executor.run { connection in
            try connection.query("""
                SELECT user_id, product_type, state, granted_at, consumed_at, store_consumed FROM purchases WHERE store = $1 AND transaction_id = $2
                """, [.text(key.store.rawValue), .text(key.transactionId)]).first.flatMap { row in
                guard let user = row[0].identifier(UserID.self), let state = row[2].string.flatMap(PurchaseState.init(rawValue:)) else { return nil }
                return ConsumptionFacts(userId: user, productType: row[1].string.flatMap(ProductType.init(rawValue:)) ?? .unknown, state: state,
                                        delivered: row[3].int64 != nil, consumed: row[4].int64 != nil || row[5].int64 == 1)
            }
        }
    }

    /// Records `userId`'s answer decided at `decidedAt` (a time ahead of `now` counts as `now`), unless a later
    /// decision is recorded already (events may arrive out of order); of two decisions at the same time the
    /// refusal stands. Returns whether this one now stands.
    @discardableResult
    public func recordConsent(userId: UserID, consumptionData: Bool, decidedAt: Date, now: Date = Date()) async throws -> Bool {
        let at = PurchaseTime.milliseconds(min(decidedAt, now))
        let value: Int64 = consumptionData ? 1 : 0
        return try await executor.run { connection in
            try connection.query("""
                INSERT INTO consents (user_id, consumption_data, decided_at) VALUES ($1, $2, $3)
                ON CONFLICT (user_id) DO UPDATE SET consumption_data = excluded.consumption_data, decided_at = excluded.decided_at
                WHERE consents.decided_at < excluded.decided_at OR (consents.decided_at = excluded.decided_at AND excluded.consumption_data = 0)
                """, [.text(userId), .integer(value), .integer(at)])
            let row = try connection.query("SELECT consumption_data, decided_at FROM consents WHERE user_id = $1", [.text(userId)]).first
            return row?[0].int64 == value && row?[1].int64 == at
        }
    }

    /// `userId`'s standing answer: nil when never asked.
    public func consumptionDataConsent(of userId: UserID) async throws -> Bool? {
        try await executor.run { connection in
            try connection.query("SELECT consumption_data FROM consents WHERE user_id = $1", [.text(userId)]).first?[0].int64.map { $0 == 1 }
        }
    }

    /// How the consumption request `notificationUUID` was answered (or why not), if it was; `sending` while claimed.
    public func consumptionAnswer(notificationUUID: String) async throws -> ConsumptionAnswer? {
        try await executor.run { connection in try Self.answer(connection, notificationUUID) }
    }

    /// Claims the consumption request `notificationUUID` about `key` for answering: `claimed` when it is this
    /// caller's to answer (new, or a claim older than `staleAfter` whose answer may not have gone out), `answered`
    /// when it was, `inProgress` while another's claim is fresh.
    public func claimConsumptionRequest(_ key: PurchaseKey, notificationUUID: String, at now: Date, staleAfter: TimeInterval) async throws -> ConsumptionClaim {
        let dialect = dialect
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                let at = PurchaseTime.milliseconds(now)
                let inserted = try connection.query("""
                    INSERT INTO consumption_answers (notification_uuid, store, transaction_id, outcome, claimed_at) VALUES ($1, $2, $3, 'sending', $4)
                    ON CONFLICT (notification_uuid) DO NOTHING RETURNING notification_uuid
                    """, [.text(notificationUUID), .text(key.store.rawValue), .text(key.transactionId), .integer(at)])
                if !inserted.isEmpty { return .claimed }
                guard let existing = try Self.answer(connection, notificationUUID) else { return .inProgress }
                guard existing.outcome == ConsumptionAnswer.sending else { return .answered(existing) }
                let claimed = try connection.query("SELECT claimed_at FROM consumption_answers WHERE notification_uuid = $1",
                                                   [.text(notificationUUID)]).first?[0].int64 ?? at
                guard at - claimed >= Int64(staleAfter * 1000) else { return .inProgress }
                try connection.query("UPDATE consumption_answers SET claimed_at = $2 WHERE notification_uuid = $1", [.text(notificationUUID), .integer(at)])
                return .claimed
            }
        }
    }

    /// Records how a claimed consumption request was answered, or why it was not.
    public func recordConsumptionAnswer(notificationUUID: String, outcome: String, detail: String?, at now: Date) async throws {
        _ = try await executor.run { connection in
            try connection.query("UPDATE consumption_answers SET outcome = $2, detail = $3, answered_at = $4 WHERE notification_uuid = $1",
                                 [.text(notificationUUID), .text(outcome), detail.map(SQLValue.text) ?? .null, .integer(PurchaseTime.milliseconds(now))])
        }
    }

    /// Gives up a claim without an answer (the API did not answer): the next attempt may take it at once.
    public func releaseConsumptionClaim(notificationUUID: String) async throws {
        _ = try await executor.run { connection in
            try connection.query("UPDATE consumption_answers SET claimed_at = 0 WHERE notification_uuid = $1 AND outcome = 'sending'", [.text(notificationUUID)])
        }
    }

    private static func answer(_ connection: any SQLConnection, _ notificationUUID: String) throws -> ConsumptionAnswer? {
        try connection.query("SELECT outcome, detail, answered_at FROM consumption_answers WHERE notification_uuid = $1",
                             [.text(notificationUUID)]).first.flatMap { row in
            row[0].string.map { ConsumptionAnswer(outcome: $0, detail: row[1].string, answeredAt: row[2].int64.map(PurchaseTime.date)) }
        }
    }
}

import Database
import Foundation
import PurchaseDomain

/// A user's history, as support reads it: derived from what the store keeps (each purchase's step times and reasons, the
/// ledger, the consent), not from a log of its own, so it says what the books say; and the verdicts refused, which the
/// books keep apart (`rejections`) for as long as the sweeper's retention.
extension SQLPurchaseStore {
    /// Where a page of a history begins: after the last event of the page before. Events are ordered newest first by
    /// time, then by their step (a finish after its grant at the same millisecond), then by their source's bytes.
    public struct HistoryCursor: Sendable, Hashable, Comparable {
        let milliseconds: Int64
        let rank: Int
        let source: [UInt8]

        /// The cursor's text (`UserHistory.next`); nil when it is not one.
        public init?(_ text: String) {
            let parts = text.split(separator: ".", omittingEmptySubsequences: false)
            guard parts.count == 3, let milliseconds = Int64(parts[0]), let rank = Int(parts[1]), (0..<UserHistory.Kind.allCases.count).contains(rank),
                  parts[2].utf8.count % 2 == 0 else { return nil }
            var source: [UInt8] = []
            var digits = parts[2].makeIterator()
            while let high = digits.next(), let low = digits.next() {
                guard let byte = UInt8(String([high, low]), radix: 16) else { return nil }
                source.append(byte)
            }
            self.init(milliseconds: milliseconds, rank: rank, source: source)
        }

        init(milliseconds: Int64, rank: Int, source: [UInt8]) {
            self.milliseconds = milliseconds
            self.rank = rank
            self.source = source
        }

        /// Milliseconds, the step's rank and the source's bytes in hex: nothing a URL query must escape.
        public var text: String {
            "\(milliseconds).\(rank)." + source.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
        }

        public static func < (a: Self, b: Self) -> Bool {
            if a.milliseconds != b.milliseconds { return a.milliseconds < b.milliseconds }
            if a.rank != b.rank { return a.rank < b.rank }
            return a.source.lexicographicallyPrecedes(b.source)
        }
    }

    /// The most events one page holds.
    public static let historyPageLimit = 500

    /// A user's history, newest first: `limit` events (1 to `historyPageLimit`) older than `before` (nil: the newest),
    /// with the cursor of the next page when there are more. Read in one transaction.
    public func history(of userId: UserID, before: HistoryCursor? = nil, limit: Int = 50) async throws -> UserHistory {
        let dialect = dialect
        let limit = min(max(limit, 1), Self.historyPageLimit)
        return try await executor.run { connection in
            var events = try Self.transaction(connection, dialect, readOnly: true) {
                try Self.purchaseSteps(connection, of: userId) + Self.ledgerEntries(connection, of: userId) + Self.rejections(connection, of: userId)
                    + Self.consentDecision(connection, of: userId)
            }
            if let before { events.removeAll { !($0.cursor < before) } }
            events.sort { $1.cursor < $0.cursor }
            let page = events.prefix(limit)
            return UserHistory(userId: userId, events: page.map(\.event), next: events.count > limit ? page.last?.cursor.text : nil)
        }
    }

    private typealias Step = (event: UserHistory.Event, cursor: HistoryCursor)

    private static func step(_ event: UserHistory.Event, milliseconds: Int64, source: [UInt8]) -> Step {
        (event, HistoryCursor(milliseconds: milliseconds, rank: UserHistory.Kind.allCases.firstIndex(of: event.kind) ?? 0, source: source))
    }

    /// Each purchase's steps, with the reason of a rejection and of a revocation recorded before its purchase.
    private static func purchaseSteps(_ connection: any SQLConnection, of userId: UserID) throws -> [Step] {
        let rows = try connection.query("""
            SELECT p.store, p.transaction_id, p.product_id, p.app, p.reject_reason, t.reason,
                   p.purchase_time, p.verified_at, p.rejected_at, p.granted_at, p.consumed_at, p.finished_at, p.refund_due_at, p.revoked_at
            FROM purchases p LEFT JOIN tombstones t ON t.store = p.store AND t.transaction_id = p.transaction_id
            WHERE p.user_id = $1
            """, [.text(userId)])
        let kinds: [UserHistory.Kind] = [.purchased, .verified, .rejected, .granted, .consumed, .finished, .refundDue, .revoked]
        var steps: [Step] = []
        for row in rows {
            guard let store = row[0].string.flatMap(Store.init(rawValue:)), let id = row[1].identifier(TransactionID.self) else { continue }
            let source = Array("p".utf8) + Array(store.rawValue.utf8) + [0] + Array(id.rawValue.utf8)
            for (offset, kind) in kinds.enumerated() {
                guard let milliseconds = row[6 + offset].int64 else { continue }
                let reason = kind == .rejected ? row[4].string : kind == .revoked ? row[5].string : nil
                steps.append(step(UserHistory.Event(at: PurchaseTime.date(milliseconds), kind: kind, store: store, transactionId: id,
                                                    productId: row[2].identifier(), app: row[3].identifier(), reason: reason),
                                  milliseconds: milliseconds, source: source))
            }
        }
        return steps
    }

    /// The user's ledger entries, with the product and app of their purchase, or the adjustment that made them.
    private static func ledgerEntries(_ connection: any SQLConnection, of userId: UserID) throws -> [Step] {
        let rows = try connection.query("""
            SELECT l.id, l.store, l.transaction_id, l.entry_kind, l.item_kind, l.code, l.amount, l.shortfall, l.expires_at, l.created_at, p.product_id, p.app,
                   a.requested_by, a.reason
            FROM ledger l LEFT JOIN purchases p ON p.store = l.store AND p.transaction_id = l.transaction_id
            LEFT JOIN adjustments a ON l.store = '\(adjustmentSource)' AND a.adjustment_id = l.transaction_id
            WHERE l.user_id = $1
            """, [.text(userId)])
        let kinds: [String: UserHistory.Kind] = ["grant": .itemGranted, "revoke": .itemRevoked, "regrant": .itemRegranted, "transfer": .itemTransferred]
        return rows.compactMap { row in
            guard let id = row[0].int64, var kind = row[3].string.flatMap({ kinds[$0] }), let itemKind = row[4].string.flatMap(GrantItem.Kind.init(rawValue:)),
                  let code = row[5].string, let amount = row[6].int64, let milliseconds = row[9].int64 else { return nil }
            let item = UserHistory.Item(kind: itemKind, code: code, amount: amount, shortfall: row[7].int64.flatMap { $0 > 0 ? $0 : nil },
                                        expiresAt: row[8].int64.map(PurchaseTime.date))
            var event = UserHistory.Event(at: PurchaseTime.date(milliseconds), kind: kind, productId: row[10].identifier(), app: row[11].identifier(), item: item)
            if row[1].string == adjustmentSource {
                kind = .adjusted
                (event.kind, event.adjustmentId, event.requestedBy, event.reason) = (kind, row[2].identifier(), row[12].string, row[13].string)
            } else {
                (event.store, event.transactionId) = (row[1].string.flatMap(Store.init(rawValue:)), row[2].identifier())
            }
            return step(event, milliseconds: milliseconds, source: Array("l".utf8) + Self.sourceBytes(of: id))
        }
    }

    /// The submissions refused to the user, with their reason and what they claimed (`rejections`): their row's id is their
    /// source, never the claimed ids (two may claim the same).
    private static func rejections(_ connection: any SQLConnection, of userId: UserID) throws -> [Step] {
        let rows = try connection.query("SELECT id, store, transaction_id, product_id, reason, rejected_at FROM rejections WHERE user_id = $1", [.text(userId)])
        return rows.compactMap { row in
            guard let id = row[0].int64, let milliseconds = row[5].int64 else { return nil }
            return step(UserHistory.Event(at: PurchaseTime.date(milliseconds), kind: .rejected, store: row[1].string.flatMap(Store.init(rawValue:)),
                                          transactionId: row[2].identifier(), productId: row[3].identifier(), reason: row[4].string),
                        milliseconds: milliseconds, source: Array("r".utf8) + sourceBytes(of: id))
        }
    }

    /// A row id's bytes in a source, zero-padded: the bytes of two ids compare as the ids.
    private static func sourceBytes(of id: Int64) -> [UInt8] { Array(String(id).leftPadded(to: 20).utf8) }

    /// The user's consent decision (the latest stands, so it is the one kept).
    private static func consentDecision(_ connection: any SQLConnection, of userId: UserID) throws -> [Step] {
        try connection.query("SELECT consumption_data, decided_at FROM consents WHERE user_id = $1", [.text(userId)]).compactMap { row in
            guard let consent = row[0].int64, let milliseconds = row[1].int64 else { return nil }
            return step(UserHistory.Event(at: PurchaseTime.date(milliseconds), kind: .consentDecided, consent: consent != 0),
                        milliseconds: milliseconds, source: Array("c".utf8))
        }
    }
}

private extension String {
    func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}

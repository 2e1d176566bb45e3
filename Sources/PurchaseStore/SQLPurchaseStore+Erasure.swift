import Crypto
import Database
import Foundation
import PurchaseDomain

/// Erasure on request: what identifies a user goes, the books stay balanced under a pseudonym.
extension SQLPurchaseStore {
    /// What an erasure did.
    public enum ErasureOutcome: Sendable, Hashable {
        /// The user's purchases, ledger entries, balances, entitlements, adjustments and rejections now belong to `pseudonym`, which
        /// nothing links to the erased id; their consent and account-token registrations were deleted.
        case erased(pseudonym: UserID, purchases: Int, ledgerEntries: Int)
        /// Erased before.
        case erasedBefore
        /// Messages of the user wait parked (their records hold the id until re-driven): erase once they are done.
        case messagesParked(Int)
    }

    /// The digest erased ids are remembered by: their reads answer 404, without the store keeping the id.
    static func erasureDigest(_ userId: UserID) -> String { sha256(Data(userId.rawValue.utf8)).lowercaseHex }

    /// Erases `userId`: in one transaction, every row that names the user is moved to a new pseudonym (purchases lose
    /// their account token too) or, for what only identifies them (consent, account-token registrations), deleted; the
    /// id's digest is kept so that reads of it answer that the user was erased.
    public func erase(_ userId: UserID, at now: Date) async throws -> ErasureOutcome {
        let dialect = dialect
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                let digest = Self.erasureDigest(userId)
                if try connection.query("SELECT 1 FROM erasures WHERE user_digest = $1", [.text(digest)]).first != nil { return .erasedBefore }
                let parked = try connection.query("SELECT count(*) FROM parked_messages WHERE message_key = $1", [.text(userId)]).first?[0].int64 ?? 0
                guard parked == 0 else { return .messagesParked(Int(parked)) }
                let pseudonym = UserID("erased-" + UUID().uuidString.lowercased())
                let moved: [SQLValue] = [.text(userId), .text(pseudonym)]
                let purchases = try connection.query("UPDATE purchases SET user_id = $2, app_account_token = NULL WHERE user_id = $1 RETURNING 1", moved).count
                let entries = try connection.query("UPDATE ledger SET user_id = $2 WHERE user_id = $1 RETURNING 1", moved).count
                for table in ["balances", "entitlements", "adjustments"] {
                    try connection.query("UPDATE \(table) SET user_id = $2 WHERE user_id = $1", moved)
                }
                // A rejection's cause names the submission, whose id may name the user: its row id stands in for it.
                try connection.query("UPDATE rejections SET user_id = $2, cause_id = 'erased:' || CAST(id AS TEXT) WHERE user_id = $1", moved)
                for table in ["consents", "account_tokens"] {
                    try connection.query("DELETE FROM \(table) WHERE user_id = $1", [.text(userId)])
                }
                try connection.query("INSERT INTO erasures (user_digest, erased_at) VALUES ($1, $2)", [.text(digest), .integer(PurchaseTime.milliseconds(now))])
                return .erased(pseudonym: pseudonym, purchases: purchases, ledgerEntries: entries)
            }
        }
    }

    /// Whether `userId` was erased and nothing was recorded for it since: an id used again after its erasure (a new
    /// account, events that were still on their way) starts afresh, and reads answer for it again.
    public func wasErased(_ userId: UserID) async throws -> Bool {
        try await executor.run { connection in
            guard try connection.query("SELECT 1 FROM erasures WHERE user_digest = $1", [.text(Self.erasureDigest(userId))]).first != nil else { return false }
            let since = try connection.query("""
                SELECT 1 FROM purchases WHERE user_id = $1 UNION ALL SELECT 1 FROM ledger WHERE user_id = $1
                UNION ALL SELECT 1 FROM consents WHERE user_id = $1 UNION ALL SELECT 1 FROM rejections WHERE user_id = $1 LIMIT 1
                """, [.text(userId)])
            return since.isEmpty
        }
    }
}

import Database
import Foundation
import PurchaseDomain

/// Restores under another user id (a new install of an app without login): the operator's restore policy and the
/// lifecycle decide whether the purchase's entitlements move. One owner at a time; every move is in the ledger.
extension SQLPurchaseStore {
    public func transfer(_ key: PurchaseKey, to newUser: UserID, policy: RestorePolicy, at now: Date) async throws -> TransferOutcome {
        try await decide(key, on: .restoreByAnotherUser(policy)) { _, connection, current, transition in
            // Not recorded (yet): nobody to move it from, nothing to grant twice.
            guard let owner = current.userId else { return .refused(owner: UserID(""), reason: transition.reason ?? .transactionOfAnotherUser) }
            if owner == newUser { return .alreadyOwned }
            guard transition.effects.contains(.transferEntitlement) else { return .refused(owner: owner, reason: transition.reason ?? .transactionOfAnotherUser) }
            let store = SQLValue.text(key.store.rawValue), transaction = SQLValue.text(key.transactionId)
            try connection.query("UPDATE purchases SET user_id = $3 WHERE store = $1 AND transaction_id = $2", [store, transaction, .text(newUser)])
            let items = try Self.heldItems(connection, key).filter { $0.kind == .entitlement }
            for item in items {
                try connection.query("UPDATE entitlements SET active = 0 WHERE user_id = $1 AND entitlement = $2 AND store = $3 AND transaction_id = $4",
                                     [.text(owner), .text(item.code), store, transaction])
                try Self.giveEntitlement(connection, item, to: newUser, from: key)
                // Amount 0: a move changes who holds the entitlement, not what the purchase gives.
                try connection.query("""
                    INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, expires_at, created_at)
                    VALUES ($1, $2, 'transfer', $3, 'entitlement', $4, 0, $5, $6)
                    """, [store, transaction, .text(newUser), .text(item.code), item.expiresAt.map { SQLValue.integer(PurchaseTime.milliseconds($0)) } ?? .null,
                          .integer(PurchaseTime.milliseconds(now))])
            }
            return .transferred(from: owner, items: items)
        }
    }
}

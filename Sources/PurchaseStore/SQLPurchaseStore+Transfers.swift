import Database
import Foundation
import PurchaseDomain

/// Restores under another user id (a new install of an app without login): the operator's restore policy and the
/// lifecycle decide whether the purchase's entitlements move. One owner at a time; every move is in the ledger.
extension SQLPurchaseStore {
    public func transfer(_ key: PurchaseKey, to newUser: String, policy: RestorePolicy, at now: Date) async throws -> TransferOutcome {
        let dialect = dialect
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                let current = try Self.current(connection, key, dialect)
                guard let owner = current.userId else { return .refused(owner: "", state: current.state) }
                if owner == newUser { return .alreadyOwned }
                let transition = Lifecycle.transition(from: current.state, on: .restoreByAnotherUser(policy), type: current.type)
                guard transition.effects.contains(.transferEntitlement) else { return .refused(owner: owner, state: current.state) }
                let at = SQLValue.integer(PurchaseTime.milliseconds(now))
                let store = SQLValue.text(key.store.rawValue), transaction = SQLValue.text(key.transactionId)
                try connection.query("UPDATE purchases SET user_id = $3 WHERE store = $1 AND transaction_id = $2", [store, transaction, .text(newUser)])
                let items = try Self.heldItems(connection, key).filter { $0.kind == .entitlement }
                for item in items {
                    let expires = item.expiresAt.map { SQLValue.integer(PurchaseTime.milliseconds($0)) } ?? .null
                    try connection.query("UPDATE entitlements SET active = 0 WHERE user_id = $1 AND entitlement = $2 AND store = $3 AND transaction_id = $4",
                                         [.text(owner), .text(item.code), store, transaction])
                    try connection.query("""
                        INSERT INTO entitlements (user_id, entitlement, store, transaction_id, expires_at, active) VALUES ($1, $2, $3, $4, $5, 1)
                        ON CONFLICT (user_id, entitlement) DO UPDATE SET store = excluded.store, transaction_id = excluded.transaction_id,
                            expires_at = excluded.expires_at, active = 1
                        """, [.text(newUser), .text(item.code), store, transaction, expires])
                    // Amount 0: a move changes who holds the entitlement, not what the purchase gives.
                    try connection.query("""
                        INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, expires_at, created_at)
                        VALUES ($1, $2, 'transfer', $3, 'entitlement', $4, 0, $5, $6)
                        """, [store, transaction, .text(newUser), .text(item.code), expires, at])
                }
                return .transferred(from: owner, items: items)
            }
        }
    }
}

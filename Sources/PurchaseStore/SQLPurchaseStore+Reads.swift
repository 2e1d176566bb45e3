import Database
import Foundation
import PurchaseDomain

/// Reads: one purchase, what a user owns.
extension SQLPurchaseStore {
    public func purchase(_ key: PurchaseKey) async throws -> PurchaseRecord? {
        let executor = executor
        return try await executor.run(usingReadAhead: true, inCallingTask: true) { connection in
            switch executor.peekReadAhead(key) {
            case .recorded(let record): return record
            case .unrecorded: return nil
            case nil: break
            }
            try executor.flushDeferred(of: key, connection)
            return try connection.query("SELECT \(Self.recordColumns) FROM purchases WHERE store = $1 AND transaction_id = $2",
                                 [.text(key.store.rawValue), .text(key.transactionId)]).first.flatMap(Self.record)
        }
    }

    /// The recorded state of each of `keys` that has a record, read in one statement (per 256 keys on SQLite).
    public func states(of keys: [PurchaseKey]) async throws -> [PurchaseKey: PurchaseState] {
        try await statesAndEnvironments(of: keys).mapValues(\.state)
    }

    public func purchases(_ keys: [PurchaseKey]) async throws -> [PurchaseKey: PurchaseRecord] {
        guard !keys.isEmpty else { return [:] }
        let dialect = dialect
        return try await executor.run { connection in
            var records: [PurchaseKey: PurchaseRecord] = [:]
            try Self.keyedRows("purchases", Self.recordColumns, of: keys, dialect) { source, values in
                for row in try connection.query("SELECT r.* FROM \(source)", values) {
                    if let record = Self.record(row) { records[record.key] = record }
                }
            }
            return records
        }
    }

    /// `states(of:)` with the environment each was verified in (`Sandbox`, `Production`, …; nil when the store named none)
    /// and the app it was bought in (nil: the primary app).
    public func statesAndEnvironments(of keys: [PurchaseKey]) async throws -> [PurchaseKey: (state: PurchaseState, environment: String?, app: AppID?)] {
        guard !keys.isEmpty else { return [:] }
        let dialect = dialect
        return try await executor.run { connection in
            var states: [PurchaseKey: (state: PurchaseState, environment: String?, app: AppID?)] = [:]
            try Self.keyedRows("purchases", "store, transaction_id, state, environment, app", of: keys, dialect) { source, values in
                for row in try connection.query("SELECT r.store, r.transaction_id, r.state, r.environment, r.app FROM \(source)", values) {
                    guard let store = row[0].string.flatMap(Store.init(rawValue:)), let id = row[1].identifier(TransactionID.self),
                          let state = row[2].string.flatMap(PurchaseState.init(rawValue:)) else { continue }
                    states[PurchaseKey(store: store, transactionId: id)] = (state, row[3].string, row[4].identifier())
                }
            }
            return states
        }
    }

    /// Where a purchase is in its lifecycle: its record's state, `revokedUnseen` when only its refund is known, or
    /// `unseen`.
    public func lifecycleState(of key: PurchaseKey) async throws -> PurchaseState {
        let dialect = dialect
        return try await executor.run { connection in try Self.current(connection, key, dialect).state }
    }

    /// The user of the subscription (or purchase) whose original transaction id is `originalTransactionId`: the
    /// owner a renewal from a notification is granted to.
    public func owner(store: Store, originalTransactionId: TransactionID) async throws -> UserID? {
        try await executor.run { connection in
            try connection.query(Self.ownerQuery, [.text(store.rawValue), .text(originalTransactionId)]).first?[0].identifier()
        }
    }

    public func originalTransactionId(store: Store, purchaseToken: PurchaseToken) async throws -> TransactionID? {
        try await executor.run { connection in
            try connection.query("""
                SELECT COALESCE(original_transaction_id, transaction_id) FROM purchases
                WHERE store = $1 AND purchase_token = $2 AND purchase_token IS NOT NULL ORDER BY purchase_time LIMIT 1
                """, [.text(store.rawValue), .text(purchaseToken)]).first?[0].identifier()
        }
    }

    public func purchases(store: Store, purchaseToken: PurchaseToken) async throws -> [PurchaseKey] {
        try await executor.run { connection in
            try connection.query("""
                SELECT transaction_id FROM purchases WHERE store = $1 AND purchase_token = $2 ORDER BY purchase_time, transaction_id
                """, [.text(store.rawValue), .text(purchaseToken)]).compactMap { row in
                    row[0].identifier(TransactionID.self).map { PurchaseKey(store: store, transactionId: $0) }
                }
        }
    }

    public func owner(ofAccountToken token: AccountToken) async throws -> UserID? {
        try await executor.run { connection in try Self.owner(connection, ofAccountToken: token) }
    }

    public func registerAccountToken(_ token: AccountToken, for userId: UserID, at now: Date) async throws -> UserID {
        let dialect = dialect
        return try await executor.run { connection in
            try Self.transaction(connection, dialect) {
                // A token a purchase of another user is bound to (and nobody registered) is theirs: not registered for this one.
                if let owner = try Self.owner(connection, ofAccountToken: token), owner != userId { return owner }
                try connection.query("""
                    INSERT INTO account_tokens (token_folded, app_account_token, user_id, registered_at) VALUES ($1, $2, $3, $4)
                    ON CONFLICT (token_folded) DO NOTHING
                    """, [.text(token.folded), .text(token), .text(userId), .integer(PurchaseTime.milliseconds(now))])
                guard let registered: UserID = try connection.query("SELECT user_id FROM account_tokens WHERE token_folded = $1",
                                                                   [.text(token.folded)]).first?[0].identifier() else {
                    throw DatabaseError(code: "registration", message: "an account token registration was not kept", isRetriable: true)
                }
                return registered
            }
        }
    }

    /// Whose `token` is: its registration (migration 22) says, else the latest purchase bound to it — a registration
    /// stands against a signed transaction another user submitted with the token.
    static func owner(_ connection: any SQLConnection, ofAccountToken token: AccountToken) throws -> UserID? {
        if let registered: UserID = try connection.query("SELECT user_id FROM account_tokens WHERE token_folded = $1",
                                                        [.text(token.folded)]).first?[0].identifier() {
            return registered
        }
        // The index folds with lower(), which PostgreSQL may apply beyond ASCII: the candidates are checked as tokens compare.
        // A purchase another user restored under `transfer` (a ledger `transfer` entry) no longer says whose the token is;
        // one nobody claimed never did.
        let bound: UserID? = try connection.query("""
            SELECT user_id, app_account_token FROM purchases WHERE lower(app_account_token) = lower($1) AND app_account_token IS NOT NULL
                AND \(LifecycleConditions.state(in: Lifecycle.provenStates)) AND user_id <> ''
                AND NOT EXISTS (SELECT 1 FROM ledger l WHERE l.store = purchases.store AND l.transaction_id = purchases.transaction_id
                                AND l.entry_kind = 'transfer')
            ORDER BY purchase_time DESC
            """, [.text(token)]).first { row in (row[1].identifier() as AccountToken?)?.isSameAccount(as: token) == true }?[0].identifier()
        return bound
    }

    /// The purchases under `originalTransactionId` (the original, its renewals and restores) that `userId` holds, oldest
    /// first: what moves when another user restores it under the `transfer` policy.
    public func purchases(store: Store, originalTransactionId: TransactionID, ownedBy userId: UserID) async throws -> [PurchaseKey] {
        try await executor.run { connection in
            try connection.query("SELECT transaction_id FROM purchases WHERE store = $1 AND \(Self.ofOriginalCondition) AND user_id = $3 ORDER BY purchase_time",
                                 [.text(store.rawValue), .text(originalTransactionId), .text(userId)])
                .compactMap { row in row[0].identifier().map { PurchaseKey(store: store, transactionId: $0) } }
        }
    }

    /// The purchases whose original transaction id is $2 (with `store = $1`): the one of that id by its key, the others
    /// (renewals) from `purchases_by_original`, which holds only purchases that are not their own original (migration 9).
    static let ofOriginalCondition = "(transaction_id = $2 OR (original_transaction_id = $2 AND original_transaction_id <> transaction_id))"

    static let ownerQuery = """
        SELECT user_id FROM purchases WHERE store = $1 AND \(ofOriginalCondition) AND \(LifecycleConditions.state(in: Lifecycle.provenStates))
            AND user_id <> '' ORDER BY purchase_time DESC LIMIT 1
        """

    /// The App Store transaction `userId` was granted last and still owns, with its environment and app — where the App
    /// Store's history of the user's Apple account is read from — and the account token the newest of the user's
    /// transactions that carries one is bound to. Nil when the user owns none.
    public func latestAppStoreTransaction(of userId: UserID) async throws -> (key: PurchaseKey, environment: String?, app: AppID?, accountToken: AccountToken?)? {
        try await executor.run { connection in
            // From the user's ledger (indexed by user): a purchase another user restored since is no longer theirs.
            let owned = try connection.query("""
                SELECT p.transaction_id, p.environment, p.app_account_token, p.app FROM ledger l
                    JOIN purchases p ON p.store = l.store AND p.transaction_id = l.transaction_id
                WHERE l.user_id = $1 AND l.store = $2 AND l.entry_kind <> 'revoke' AND p.user_id = $1
                ORDER BY l.id DESC LIMIT 100
                """, [.text(userId), .text(Store.appstore.rawValue)])
            guard let newest = owned.first, let id: TransactionID = newest[0].identifier() else { return nil }
            return (PurchaseKey(store: .appstore, transactionId: id), newest[1].string, newest[3].identifier(),
                    owned.lazy.compactMap { $0[2].identifier() as AccountToken? }.first)
        }
    }

    /// What a purchase grants now: its grants and re-grants less what was taken back.
    public func grantedItems(_ key: PurchaseKey) async throws -> [GrantItem] {
        try await executor.run { connection in try Self.heldItems(connection, key) }
    }

    /// What `userId` owns at `now`, read in one transaction: balances, entitlements in force with the product that
    /// gives each, purchases granted but not finished, and the statuses of their subscriptions.
    public func holdings(of userId: UserID, at now: Date = Date()) async throws -> UserHoldings {
        let dialect = dialect
        return try await executor.run { connection in
            try Self.transaction(connection, dialect, readOnly: true) {
                let pending = try connection.query(Self.pendingOfUserQuery, [.text(userId)]).compactMap(Self.record).map {
                    UserHoldings.Pending(store: $0.key.store, transactionId: $0.key.transactionId, productId: $0.productId, productType: $0.productType,
                                         purchasedAt: $0.purchaseTime, app: $0.app)
                }
                return UserHoldings(userId: userId, balances: try Self.balances(connection, of: userId),
                                    entitlements: try Self.entitlementsInForce(connection, of: userId, at: now), pending: pending,
                                    subscriptions: try Self.subscriptionStatuses(connection, of: userId))
            }
        }
    }

    /// A user's purchases granted but not finished, oldest first (from `purchases_granted_by_user`, migrations 8 and 9).
    static let pendingOfUserQuery = """
        SELECT \(recordColumns) FROM purchases WHERE user_id = $1 AND is_open AND \(LifecycleConditions.state(in: Lifecycle.awaitingFinishStates)) ORDER BY purchase_time
        """

    /// A user's currency balances.
    public func balances(of userId: UserID) async throws -> [ItemCode: Int64] {
        try await executor.run { connection in try Self.balances(connection, of: userId) }
    }

    /// A user's entitlements in force at `now` and their expiry (nil: no expiry).
    public func entitlements(of userId: UserID, at now: Date = Date()) async throws -> [ItemCode: Date?] {
        try await executor.run { connection in
            var entitlements: [ItemCode: Date?] = [:]
            for entitlement in try Self.entitlementsInForce(connection, of: userId, at: now) {
                // updateValue: assigning a nil expiry through the subscript would remove the entitlement.
                entitlements.updateValue(entitlement.expiresAt, forKey: entitlement.entitlement)
            }
            return entitlements
        }
    }

    static func balances(_ connection: any SQLConnection, of userId: UserID) throws -> [ItemCode: Int64] {
        var balances: [ItemCode: Int64] = [:]
        for row in try connection.query("SELECT currency, amount FROM balances WHERE user_id = $1", [.text(userId)]) {
            if let currency = row[0].identifier(ItemCode.self), let amount = row[1].int64 { balances[currency] = amount }
        }
        return balances
    }

    /// Active and not expired at `now`, once each: until the latest expiry of the purchases that give it (nil, for good,
    /// outlasts any), with the product of that purchase.
    private static func entitlementsInForce(_ connection: any SQLConnection, of userId: UserID, at now: Date) throws -> [UserHoldings.Entitlement] {
        var held: [UserHoldings.Entitlement] = []
        for row in try connection.query("""
            SELECT e.entitlement, p.product_id, e.expires_at FROM entitlements e
            LEFT JOIN purchases p ON p.store = e.store AND p.transaction_id = e.transaction_id
            WHERE e.user_id = $1 AND e.active = 1 AND (e.expires_at IS NULL OR e.expires_at > $2)
            ORDER BY e.entitlement, coalesce(e.expires_at, \(Int64.max)) DESC, p.product_id
            """, [.text(userId), .integer(PurchaseTime.milliseconds(now))]) {
            // The first row of each entitlement is the one that lasts longest.
            guard let code = row[0].identifier(ItemCode.self), held.last?.entitlement != code else { continue }
            held.append(UserHoldings.Entitlement(entitlement: code, productId: row[1].identifier(), expiresAt: row[2].int64.map(PurchaseTime.date)))
        }
        return held
    }
}

import Database
import PurchaseDomain

/// Adding to a balance: never past `CurrencyAmounts.balanceLimit`, so that no sum of the books overflows (SQLite would turn
/// it into a floating-point number, PostgreSQL refuse it).
extension SQLPurchaseStore {
    /// Adds a positive amount of at most `CurrencyAmounts.balanceLimit` to a user's balance of a currency (the parameters
    /// named), answering the new balance; nothing, and no row, when the sum would pass the limit (the subtraction cannot
    /// overflow: both are at most the limit).
    static func addToBalance(user: String, currency: String, amount: String) -> String {
        """
        INSERT INTO balances (user_id, currency, amount) VALUES (\(user), \(currency), \(amount))
        ON CONFLICT (user_id, currency) DO UPDATE SET amount = balances.amount + excluded.amount
        WHERE balances.amount <= \(CurrencyAmounts.balanceLimit) - excluded.amount RETURNING amount
        """
    }

    static let addToBalanceAlone = addToBalance(user: "$1", currency: "$2", amount: "$3")

    /// PostgreSQL: `addToBalance` of its user, currency and amount and, when the balance took it, `insertEntry`, in one
    /// statement, answering both (typed: the entry's values are a SELECT's, which PostgreSQL does not type by its columns).
    static let insertEntryAddingToBalance = """
        WITH balance AS (\(addToBalance(user: "$4::text", currency: "$6::text", amount: "$7::bigint"))),
        entry AS (
            INSERT INTO ledger (store, transaction_id, entry_kind, user_id, item_kind, code, amount, expires_at, created_at)
            SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::bigint, $8::bigint, $9::bigint FROM balance RETURNING id
        )
        SELECT (SELECT id FROM entry), (SELECT amount FROM balance)
        """

    /// Why `item` was not added to `userId`'s balance (the balance it found): `BalanceOutOfRange` when nothing of the call
    /// was written, else a permanent error (what was written must not be committed as a decision).
    static func balanceRefused(_ connection: any SQLConnection, _ item: GrantItem, of userId: UserID, afterWriting: Bool) throws -> any Error {
        let balance = try connection.query("SELECT amount FROM balances WHERE user_id = $1 AND currency = $2", [.text(userId), .text(item.code)]).first?[0].int64
        let refusal = BalanceOutOfRange(currency: item.code, balance: balance ?? 0, amount: item.amount)
        return afterWriting ? DatabaseError(code: "22003", message: refusal.description, isRetriable: false) : refusal
    }
}

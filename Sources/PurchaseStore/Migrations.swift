import Database

/// Versioned schema migrations, one script per version and engine. Applied in order, each once,
/// recorded in `schema_migrations`. New versions are appended; applied ones never change.
enum Migrations {
    enum Dialect: Sendable { case sqlite, postgres }

    static func scripts(_ dialect: Dialect) -> [(version: Int, sql: String)] {
        let id = dialect == .sqlite ? "INTEGER PRIMARY KEY AUTOINCREMENT" : "BIGSERIAL PRIMARY KEY"
        return firstScripts(dialect, id: id) + laterScripts(dialect, id: id)
    }

    /// Versions 1 to 17.
    private static func firstScripts(_ dialect: Dialect, id: String) -> [(version: Int, sql: String)] {
        [
            (1, """
            CREATE TABLE purchases (
                store TEXT NOT NULL,
                transaction_id TEXT NOT NULL,
                original_transaction_id TEXT,
                user_id TEXT NOT NULL,
                product_id TEXT NOT NULL,
                quantity BIGINT NOT NULL CHECK (quantity > 0),
                purchase_time BIGINT NOT NULL,
                environment TEXT,
                state TEXT NOT NULL CHECK (state IN ('verified', 'granted', 'finished', 'rejected', 'refund_due', 'revoked')),
                reject_reason TEXT,
                verified_at BIGINT, granted_at BIGINT, finished_at BIGINT, rejected_at BIGINT, refund_due_at BIGINT, revoked_at BIGINT,
                PRIMARY KEY (store, transaction_id)
            );
            CREATE INDEX purchases_open_by_time ON purchases (state, purchase_time);
            CREATE TABLE ledger (
                id \(id),
                store TEXT NOT NULL,
                transaction_id TEXT NOT NULL,
                entry_kind TEXT NOT NULL CHECK (entry_kind IN ('grant', 'revoke')),
                user_id TEXT NOT NULL,
                item_kind TEXT NOT NULL CHECK (item_kind IN ('currency', 'entitlement')),
                code TEXT NOT NULL,
                amount BIGINT NOT NULL,
                shortfall BIGINT NOT NULL DEFAULT 0,
                expires_at BIGINT,
                created_at BIGINT NOT NULL,
                UNIQUE (store, transaction_id, entry_kind, item_kind, code)
            );
            CREATE INDEX ledger_by_user ON ledger (user_id);
            CREATE TABLE balances (
                user_id TEXT NOT NULL,
                currency TEXT NOT NULL,
                amount BIGINT NOT NULL CHECK (amount >= 0),
                PRIMARY KEY (user_id, currency)
            );
            CREATE TABLE entitlements (
                user_id TEXT NOT NULL,
                entitlement TEXT NOT NULL,
                store TEXT NOT NULL,
                transaction_id TEXT NOT NULL,
                expires_at BIGINT,
                active BIGINT NOT NULL,
                PRIMARY KEY (user_id, entitlement)
            );
            """),
            // An outbox for refund.due: flagging is exactly once (a conditional state change), the event is
            // sent afterwards and re-sent until recorded as sent, so a crash in between loses nothing.
            (2, """
            ALTER TABLE purchases ADD COLUMN refund_notified_at BIGINT;
            CREATE INDEX purchases_refund_outbox ON purchases (state, refund_notified_at);
            """),
            // AppCoins: what the store API needs to be asked again, and whether it reported the purchase consumed.
            (3, """
            ALTER TABLE purchases ADD COLUMN package_name TEXT;
            ALTER TABLE purchases ADD COLUMN purchase_token TEXT;
            ALTER TABLE purchases ADD COLUMN store_consumed BIGINT NOT NULL DEFAULT 0;
            """),
            // Product types (existing rows: 'unknown' until `assignProductTypes` names them from the catalog);
            // tombstones for refunds that arrive before their purchase; a ledger that can grant again after a
            // reversed refund and move entitlements (rebuilt: SQLite cannot alter a CHECK constraint).
            (4, """
            ALTER TABLE purchases ADD COLUMN product_type TEXT NOT NULL DEFAULT 'unknown'
                CHECK (product_type IN ('consumable', 'nonConsumable', 'autoRenewable', 'nonRenewing', 'unknown'));
            CREATE INDEX purchases_by_original ON purchases (store, original_transaction_id);
            CREATE TABLE tombstones (
                store TEXT NOT NULL,
                transaction_id TEXT NOT NULL,
                reason TEXT NOT NULL,
                revoked_at BIGINT NOT NULL,
                reversed_at BIGINT,
                PRIMARY KEY (store, transaction_id)
            );
            CREATE TABLE ledger_v4 (
                id \(id),
                store TEXT NOT NULL,
                transaction_id TEXT NOT NULL,
                entry_kind TEXT NOT NULL CHECK (entry_kind IN ('grant', 'revoke', 'regrant', 'transfer')),
                user_id TEXT NOT NULL,
                item_kind TEXT NOT NULL CHECK (item_kind IN ('currency', 'entitlement')),
                code TEXT NOT NULL,
                amount BIGINT NOT NULL,
                shortfall BIGINT NOT NULL DEFAULT 0,
                expires_at BIGINT,
                created_at BIGINT NOT NULL
            );
            INSERT INTO ledger_v4 (id, store, transaction_id, entry_kind, user_id, item_kind, code, amount, shortfall, expires_at, created_at)
                SELECT id, store, transaction_id, entry_kind, user_id, item_kind, code, amount, shortfall, expires_at, created_at FROM ledger;
            DROP TABLE ledger;
            ALTER TABLE ledger_v4 RENAME TO ledger;
            CREATE INDEX ledger_by_user ON ledger (user_id);
            CREATE INDEX ledger_by_purchase ON ledger (store, transaction_id);
            \(dialect == .postgres ? "SELECT setval(pg_get_serial_sequence('ledger', 'id'), COALESCE((SELECT max(id) FROM ledger), 0) + 1, false);" : "")
            """),
            // When the app reported a purchase consumed; each user's answer to sharing consumption data with the
            // store (the latest decision stands); and each of the store's consumption requests, claimed before it is
            // answered ('sending') so that it is answered once, then how it was answered or why it was not.
            (5, """
            ALTER TABLE purchases ADD COLUMN consumed_at BIGINT;
            CREATE TABLE consents (
                user_id TEXT PRIMARY KEY,
                consumption_data BIGINT NOT NULL,
                decided_at BIGINT NOT NULL
            );
            CREATE TABLE consumption_answers (
                notification_uuid TEXT PRIMARY KEY,
                store TEXT NOT NULL,
                transaction_id TEXT NOT NULL,
                outcome TEXT NOT NULL,
                detail TEXT,
                claimed_at BIGINT NOT NULL,
                answered_at BIGINT
            );
            """),
            // Messages a stage parked on the retry topic and has not re-driven yet: the key's later messages wait
            // behind them, whichever replica owns the partition now; `token` names the one current record of each on
            // the retry topic; `recheck` marks answered messages asked about again (see StageRunner+Parking).
            (6, """
            CREATE TABLE parked_messages (
                stage TEXT NOT NULL,
                origin_topic TEXT NOT NULL,
                origin_partition BIGINT NOT NULL,
                origin_offset BIGINT NOT NULL,
                message_key TEXT,
                recheck BIGINT NOT NULL,
                token TEXT NOT NULL,
                reason TEXT NOT NULL,
                parked_at BIGINT NOT NULL,
                PRIMARY KEY (stage, origin_topic, origin_partition, origin_offset)
            );
            CREATE INDEX parked_messages_by_key ON parked_messages (stage, message_key);
            """),
            // The sweeper's indexes hold only the purchases they look for: open ones, and refund notices not yet sent.
            // Indexed on (state, …) they held every purchase ever, and each state change added an entry to both.
            (7, """
            DROP INDEX purchases_open_by_time;
            DROP INDEX purchases_refund_outbox;
            CREATE INDEX purchases_open_by_time ON purchases (store, purchase_time) WHERE state IN ('verified', 'granted');
            CREATE INDEX purchases_refund_outbox ON purchases (store, purchase_time) WHERE state = 'refund_due' AND refund_notified_at IS NULL;
            """),
            // A user's purchases granted but not finished, which `GET /v1/users/{id}` answers with: without it each request
            // read every purchase of every user.
            (8, """
            CREATE INDEX purchases_granted_by_user ON purchases (user_id, purchase_time) WHERE state = 'granted';
            """),
            // A grant (verified → granted) as a heap-only update on PostgreSQL: an update adds an entry to every index of the
            // row unless no indexed column changes, and `state` was one, in the partial indexes' conditions. Those
            // conditions now read two columns derived from it that a grant leaves as they are, and pages keep room for
            // the row's next version. And a purchase that is its own original (every consumable) has no entry by original:
            // its key finds it. (SQLite has no such updates: its columns are virtual, for the same queries to run.)
            (9, dialect == .postgres ? """
            ALTER TABLE purchases ADD COLUMN is_open BOOLEAN GENERATED ALWAYS AS (state IN ('verified', 'granted')) STORED,
                ADD COLUMN refund_unsent BOOLEAN GENERATED ALWAYS AS (state = 'refund_due' AND refund_notified_at IS NULL) STORED;
            ALTER TABLE purchases SET (fillfactor = 50);
            DROP INDEX purchases_open_by_time;
            DROP INDEX purchases_refund_outbox;
            DROP INDEX purchases_granted_by_user;
            DROP INDEX purchases_by_original;
            CREATE INDEX purchases_by_original ON purchases (store, original_transaction_id) WHERE original_transaction_id <> transaction_id;
            CREATE INDEX purchases_open_by_time ON purchases (store, purchase_time) WHERE is_open;
            CREATE INDEX purchases_refund_outbox ON purchases (store, purchase_time) WHERE refund_unsent;
            CREATE INDEX purchases_granted_by_user ON purchases (user_id, purchase_time) WHERE is_open;
            """ : """
            ALTER TABLE purchases ADD COLUMN is_open BOOLEAN GENERATED ALWAYS AS (state IN ('verified', 'granted')) VIRTUAL;
            ALTER TABLE purchases ADD COLUMN refund_unsent BOOLEAN GENERATED ALWAYS AS (state = 'refund_due' AND refund_notified_at IS NULL) VIRTUAL;
            """),
            // Entitlements: one row per purchase that gives one (reads take the latest expiry of those in force), not one per
            // user and entitlement that each grant overwrote: a season pass bought before a monthly one ended with the
            // monthly's, and the monthly's refund took both. Rows are kept as they are; what a purchase still in force
            // gives by its ledger (granted, not taken back) but whose row was overwritten comes back. Rebuilt: SQLite
            // cannot change a primary key.
            (10, """
            CREATE TABLE entitlements_v10 (
                user_id TEXT NOT NULL,
                entitlement TEXT NOT NULL,
                store TEXT NOT NULL,
                transaction_id TEXT NOT NULL,
                expires_at BIGINT,
                active BIGINT NOT NULL,
                PRIMARY KEY (user_id, entitlement, store, transaction_id)
            );
            INSERT INTO entitlements_v10 (user_id, entitlement, store, transaction_id, expires_at, active)
                SELECT user_id, entitlement, store, transaction_id, expires_at, active FROM entitlements;
            INSERT INTO entitlements_v10 (user_id, entitlement, store, transaction_id, expires_at, active)
                SELECT p.user_id, l.code, l.store, l.transaction_id, max(l.expires_at), 1
                FROM ledger l JOIN purchases p ON p.store = l.store AND p.transaction_id = l.transaction_id
                WHERE l.item_kind = 'entitlement' AND l.entry_kind IN ('grant', 'regrant', 'revoke') AND p.state IN ('granted', 'finished', 'refund_due')
                    AND NOT EXISTS (SELECT 1 FROM entitlements e WHERE e.store = l.store AND e.transaction_id = l.transaction_id AND e.entitlement = l.code)
                GROUP BY p.user_id, l.code, l.store, l.transaction_id
                HAVING sum(l.amount) > 0;
            DROP TABLE entitlements;
            ALTER TABLE entitlements_v10 RENAME TO entitlements;
            CREATE INDEX entitlements_by_purchase ON entitlements (store, transaction_id);
            """),
            // The expiry a verified transaction carries (a subscription period's end), for a grant made without its
            // purchase.verified: a subscription refunded before its grant and reinstated was given its entitlement for good.
            (11, """
            ALTER TABLE purchases ADD COLUMN expires_at BIGINT;
            """),
            // The purchases of unknown product type, which `/metrics` counts at each scrape: without it each scrape read
            // every purchase ever recorded. Rows from before types were kept; none once the catalog names them.
            (12, """
            CREATE INDEX purchases_of_unknown_type ON purchases (store) WHERE product_type = 'unknown';
            """),
            // The app's consumption reports that came before their purchase was recorded (the app and the verification run
            // concurrently; a verifier outage delays the record by as long as it lasts): the record takes its `consumed_at`
            // from here, so that a consumed purchase is finished at its grant and never flagged for refund.
            (13, """
            CREATE TABLE early_consumption (
                store TEXT NOT NULL,
                transaction_id TEXT NOT NULL,
                consumed_at BIGINT NOT NULL,
                PRIMARY KEY (store, transaction_id)
            );
            """),
            // When the store made its latest refund decision about a purchase (a REFUND's or REFUND_REVERSED's notification
            // signed), recorded or not: notifications arrive in any order, and an older decision arriving late (a refund
            // after its reversal, a retried refund) changes nothing.
            (14, """
            CREATE TABLE refund_decisions (
                store TEXT NOT NULL,
                transaction_id TEXT NOT NULL,
                decided_at BIGINT NOT NULL,
                PRIMARY KEY (store, transaction_id)
            );
            """),
            // The account a transaction is bound to (StoreKit's appAccountToken, signed): a restore of it under another user,
            // as a receipt (which carries none) or a new transaction naming it, is judged by it.
            (15, """
            ALTER TABLE purchases ADD COLUMN app_account_token TEXT;
            """),
            // AppCoins' developerPayload is the developer's own text: recorded as an account token by version 15 whatever it
            // was, it bound purchases to a Unity JSON or an order id. Only a UUID is an account token.
            (16, """
            UPDATE purchases SET app_account_token = NULL WHERE store = 'appcoins' AND app_account_token IS NOT NULL
                AND (length(app_account_token) <> 36 OR app_account_token NOT LIKE '________-____-____-____-____________');
            """),
            // The store notifications the verifier handled, so that a reconciliation pass over the store's history tells
            // the lost ones from those that arrived; and how far each history was read, under a lease (one replica at a time).
            (17, """
            CREATE TABLE notifications_seen (
                notification_uuid TEXT PRIMARY KEY,
                notification_type TEXT NOT NULL,
                seen_at BIGINT NOT NULL
            );
            CREATE INDEX notifications_seen_by_time ON notifications_seen (seen_at);
            CREATE TABLE reconciliation_checkpoints (
                name TEXT PRIMARY KEY,
                position BIGINT,
                lease_owner TEXT,
                lease_until BIGINT NOT NULL,
                updated_at BIGINT NOT NULL
            );
            """),
        ]
    }
}

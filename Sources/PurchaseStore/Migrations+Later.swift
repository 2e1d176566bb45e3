extension Migrations {
    /// Versions 18 on (see `scripts`).
    static func laterScripts(_ dialect: Dialect, id: String) -> [(version: Int, sql: String)] {
        [
            // Charges the store announced that nobody claimed yet ('unclaimed', a state the CHECK did not allow: SQLite cannot
            // alter a CHECK constraint, so its table is rebuilt as it stands, with the same columns in the same order), with
            // an index for the sweep, the gauge and its oldest (on PostgreSQL selected by a column derived from the state, as
            // in version 9, so that a grant stays a heap-only update); and purchases by account token (ASCII case-folded, as
            // tokens compare), so that such a charge finds the user a token belongs to.
            (18, (dialect == .postgres ? """
            ALTER TABLE purchases DROP CONSTRAINT purchases_state_check;
            ALTER TABLE purchases ADD CONSTRAINT purchases_state_check
                CHECK (state IN ('unclaimed', 'verified', 'granted', 'finished', 'rejected', 'refund_due', 'revoked'));
            ALTER TABLE purchases ADD COLUMN is_unclaimed BOOLEAN GENERATED ALWAYS AS (state = 'unclaimed') STORED;
            CREATE INDEX purchases_unclaimed ON purchases (purchase_time) WHERE is_unclaimed;
            """ : """
            CREATE TABLE purchases_v18 (
                store TEXT NOT NULL,
                transaction_id TEXT NOT NULL,
                original_transaction_id TEXT,
                user_id TEXT NOT NULL,
                product_id TEXT NOT NULL,
                quantity BIGINT NOT NULL CHECK (quantity > 0),
                purchase_time BIGINT NOT NULL,
                environment TEXT,
                state TEXT NOT NULL CHECK (state IN ('unclaimed', 'verified', 'granted', 'finished', 'rejected', 'refund_due', 'revoked')),
                reject_reason TEXT,
                verified_at BIGINT, granted_at BIGINT, finished_at BIGINT, rejected_at BIGINT, refund_due_at BIGINT, revoked_at BIGINT,
                refund_notified_at BIGINT, package_name TEXT, purchase_token TEXT, store_consumed BIGINT NOT NULL DEFAULT 0,
                product_type TEXT NOT NULL DEFAULT 'unknown' CHECK (product_type IN ('consumable', 'nonConsumable', 'autoRenewable', 'nonRenewing', 'unknown')),
                consumed_at BIGINT,
                is_open BOOLEAN GENERATED ALWAYS AS (state IN ('verified', 'granted')) VIRTUAL,
                refund_unsent BOOLEAN GENERATED ALWAYS AS (state = 'refund_due' AND refund_notified_at IS NULL) VIRTUAL,
                expires_at BIGINT, app_account_token TEXT,
                is_unclaimed BOOLEAN GENERATED ALWAYS AS (state = 'unclaimed') VIRTUAL,
                PRIMARY KEY (store, transaction_id)
            );
            INSERT INTO purchases_v18 (store, transaction_id, original_transaction_id, user_id, product_id, quantity, purchase_time, environment, state,
                                       reject_reason, verified_at, granted_at, finished_at, rejected_at, refund_due_at, revoked_at, refund_notified_at,
                                       package_name, purchase_token, store_consumed, product_type, consumed_at, expires_at, app_account_token)
                SELECT store, transaction_id, original_transaction_id, user_id, product_id, quantity, purchase_time, environment, state,
                       reject_reason, verified_at, granted_at, finished_at, rejected_at, refund_due_at, revoked_at, refund_notified_at,
                       package_name, purchase_token, store_consumed, product_type, consumed_at, expires_at, app_account_token
                FROM purchases;
            DROP TABLE purchases;
            ALTER TABLE purchases_v18 RENAME TO purchases;
            CREATE INDEX purchases_by_original ON purchases (store, original_transaction_id);
            CREATE INDEX purchases_open_by_time ON purchases (store, purchase_time) WHERE state IN ('verified', 'granted');
            CREATE INDEX purchases_refund_outbox ON purchases (store, purchase_time) WHERE state = 'refund_due' AND refund_notified_at IS NULL;
            CREATE INDEX purchases_granted_by_user ON purchases (user_id, purchase_time) WHERE state = 'granted';
            CREATE INDEX purchases_of_unknown_type ON purchases (store) WHERE product_type = 'unknown';
            CREATE INDEX purchases_unclaimed ON purchases (purchase_time) WHERE state = 'unclaimed';
            """) + """
            CREATE INDEX purchases_by_account_token ON purchases (lower(app_account_token)) WHERE app_account_token IS NOT NULL;
            """),
            // What the store last said of each subscription's renewal (will it renew, to which product, a billing issue, its
            // grace period, a price increase, why it expired, the offer), by store and original transaction id, recorded
            // before any purchase of it may be; and a user's subscription purchases, which the read side finds theirs by
            // (partial: only subscriptions pay for the entry, and a grant changes neither column).
            (19, """
            CREATE TABLE subscription_statuses (
                store TEXT NOT NULL,
                original_transaction_id TEXT NOT NULL,
                product_id TEXT,
                will_renew BIGINT,
                pending_product_id TEXT,
                billing_issue_since BIGINT,
                grace_period_ends_at BIGINT,
                price_increase_status BIGINT,
                expiration_reason BIGINT,
                offer_type BIGINT,
                offer_identifier TEXT,
                as_of BIGINT NOT NULL,
                PRIMARY KEY (store, original_transaction_id)
            );
            CREATE INDEX purchases_subscriptions_by_user ON purchases (user_id) WHERE product_type = 'autoRenewable';
            """),
            // Subscription periods by expiry: the sweeper's question of which lapsed with nothing heard since.
            (20, """
            CREATE INDEX purchases_subscription_expiry ON purchases (store, expires_at) WHERE product_type = 'autoRenewable';
            """),
            // What the announcement of each stored status named (comma-separated fields; empty: it had none), so that the
            // same information again announces it again, under the same id.
            (21, """
            ALTER TABLE subscription_statuses ADD COLUMN announced TEXT NOT NULL DEFAULT '';
            """),
            // Account tokens the apps' backends registered for their users (`user.token`), by the token with its ASCII
            // letters in lower case (one spelling per account): the first registration stands.
            (22, """
            CREATE TABLE account_tokens (
                token_folded TEXT PRIMARY KEY,
                app_account_token TEXT NOT NULL,
                user_id TEXT NOT NULL,
                registered_at BIGINT NOT NULL
            );
            """),
            // The deployment's app each purchase was bought in (its id in the apps file); NULL: the primary app (purchases
            // recorded before apps were named, and every purchase of a deployment that names none).
            (23, """
            ALTER TABLE purchases ADD COLUMN app TEXT;
            """),
            // Purchases by purchase token (Google Play, AppCoins): a subscription bought in place of another names the old
            // one's token (`linkedPurchaseToken`), and continues its subscription.
            (24, """
            CREATE INDEX purchases_by_purchase_token ON purchases (store, purchase_token) WHERE purchase_token IS NOT NULL;
            """),
            // Until when the customer paused a subscription (Google Play's `pausedStateContext.autoResumeTime`).
            (25, """
            ALTER TABLE subscription_statuses ADD COLUMN paused_until BIGINT;
            """),
            // A user's purchases, whatever their state: the history support reads (`SQLPurchaseStore.history(of:)`).
            (26, """
            CREATE INDEX purchases_by_user ON purchases (user_id);
            """),
            // Adjustments by hand, once per id (the operator's idempotency key), with who asked and why; `signature` is the
            // request's user, reversed adjustment and items, to tell a repeat from an id used again. Their ledger entries'
            // source is ('adjustment', id).
            (27, """
            CREATE TABLE adjustments (
                adjustment_id TEXT PRIMARY KEY,
                user_id TEXT NOT NULL,
                requested_by TEXT NOT NULL,
                reason TEXT NOT NULL,
                reverses TEXT,
                reversed_by TEXT,
                signature TEXT NOT NULL,
                applied_at BIGINT NOT NULL
            );
            CREATE INDEX adjustments_by_user ON adjustments (user_id);
            """),
            // The verdicts refused (`purchase.rejected`), for their users' histories: apart from `purchases`, so that a forged
            // submission's claimed ids never block the real purchase; keyed by user and the rejected event's cause (a
            // redelivery records nothing new), pruned by time (the sweeper's `--rejection-retention-days`).
            (28, """
            CREATE TABLE rejections (
                id \(id),
                user_id TEXT NOT NULL,
                cause_id TEXT NOT NULL,
                store TEXT NOT NULL,
                transaction_id TEXT,
                product_id TEXT,
                reason TEXT NOT NULL,
                rejected_at BIGINT NOT NULL,
                UNIQUE (user_id, cause_id)
            );
            CREATE INDEX rejections_by_time ON rejections (rejected_at);
            """),
            // The users erased on request, by the SHA-256 of their id (not the id): their reads answer that they are gone.
            (29, """
            CREATE TABLE erasures (
                user_digest TEXT PRIMARY KEY,
                erased_at BIGINT NOT NULL
            );
            """),
            // What each stage's partitions have in flight, so that the message that crashes a worker is found by whichever
            // replica holds the partition next (see StageRunner+Crashes): the offsets in hand, those in hand at a crash, and the
            // culprits (messages that trapped the worker; offsets, comma-separated) until the partition is committed past them.
            (30, """
            CREATE TABLE in_flight_marks (
                stage TEXT NOT NULL,
                topic TEXT NOT NULL,
                topic_partition BIGINT NOT NULL,
                handling_first BIGINT,
                handling_last BIGINT,
                suspect_first BIGINT,
                suspect_last BIGINT,
                culprits TEXT NOT NULL,
                marked_at BIGINT NOT NULL,
                PRIMARY KEY (stage, topic, topic_partition)
            );
            """),
            // Amounts stay integers. SQLite turns an integer sum that overflows into a floating-point number, which a BIGINT
            // column keeps as it is (a balance of 9.2e18 that no read takes for an amount); triggers refuse such a value in
            // a balance or a ledger entry, as SQLite's `sum` refuses an overflow (the same words): the statement fails,
            // permanently. (SQLite cannot add a CHECK to a column; rows written before stay as they are.) PostgreSQL's
            // BIGINT refuses an overflow itself (SQLSTATE 22003).
            (31, dialect == .postgres ? "SELECT 1;" : """
            CREATE TRIGGER balances_amount_insert BEFORE INSERT ON balances WHEN typeof(NEW.amount) <> 'integer'
                BEGIN SELECT RAISE(ABORT, 'integer overflow: a balance is an integer'); END;
            CREATE TRIGGER balances_amount_update BEFORE UPDATE OF amount ON balances WHEN typeof(NEW.amount) <> 'integer'
                BEGIN SELECT RAISE(ABORT, 'integer overflow: a balance is an integer'); END;
            CREATE TRIGGER ledger_amount_insert BEFORE INSERT ON ledger WHEN typeof(NEW.amount) <> 'integer' OR typeof(NEW.shortfall) <> 'integer'
                BEGIN SELECT RAISE(ABORT, 'integer overflow: a ledger amount is an integer'); END;
            CREATE TRIGGER ledger_amount_update BEFORE UPDATE OF amount, shortfall ON ledger
                WHEN typeof(NEW.amount) <> 'integer' OR typeof(NEW.shortfall) <> 'integer'
                BEGIN SELECT RAISE(ABORT, 'integer overflow: a ledger amount is an integer'); END;
            """),
            // Until when a history's store API asked not to be called (`Retry-After`, in epoch milliseconds), so that the next
            // pass waits whichever process makes it (a following `iap-sweeper --once` too).
            (32, """
            ALTER TABLE reconciliation_checkpoints ADD COLUMN not_before BIGINT;
            """),
            // A Stripe refund or dispute names the payment intent its purchases were recorded with (as their token): found
            // by it without a scan.
            (33, """
            CREATE INDEX purchases_by_token ON purchases (store, purchase_token) WHERE purchase_token IS NOT NULL;
            """),
        ]
    }
}

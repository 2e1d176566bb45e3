import Database

extension Migrations {
    /// The newest version.
    static var latestVersion: Int { scripts(.sqlite).map(\.version).max() ?? 0 }

    /// Applies what is missing; returns the versions applied now. Safe to run from several processes
    /// at once: each version is applied in a transaction that also records it.
    static func apply(_ connection: any SQLConnection, dialect: Dialect, through last: Int = .max) throws -> [Int] {
        try connection.executeScript("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)")
        var applied: [Int] = []
        for (version, sql) in scripts(dialect) where version <= last {
            try connection.query(dialect == .sqlite ? "BEGIN IMMEDIATE" : "BEGIN")
            do {
                if dialect == .postgres {
                    // A migration waits for the workers' locks (and another migrator's) as long as they last.
                    try connection.query("SET LOCAL lock_timeout = 0")
                    // Serialises concurrent migrators on PostgreSQL (SQLite's BEGIN IMMEDIATE already does).
                    try connection.query("SELECT pg_advisory_xact_lock(7300001)")
                }
                let done = try connection.query("SELECT 1 FROM schema_migrations WHERE version = $1", [.integer(Int64(version))])
                if done.isEmpty {
                    try connection.executeScript(sql)
                    try connection.query("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                                         [.integer(Int64(version)), .integer(PurchaseTime.milliseconds(.now))])
                    applied.append(version)
                }
                try connection.query("COMMIT")
            } catch {
                _ = try? connection.query("ROLLBACK") // The original error is what matters.
                throw error
            }
        }
        return applied
    }
}

@testable import Database
import Foundation
import Testing
import TestSupport

/// The same checks against both engines: parameters round-trip untouched (no SQL injection, no
/// mangling), constraint violations are recognised, transactions commit and roll back.
enum Engine: String, CaseIterable, Sendable {
    case sqlite, postgres

    func connect() throws -> any SQLConnection {
        switch self {
        case .sqlite:
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("iap-db-\(UUID().uuidString).sqlite").path
            return try SQLiteConnection(path: path)
        case .postgres:
            return try PostgresConnection(url: try TestServices.requirePostgres())
        }
    }
}

@Suite struct SQLConnectionTests {
    // A NUL byte is stored whole by SQLite; PostgreSQL text cannot hold one (tested separately).
    static let hostile = ["'; DROP TABLE t; --", "Robert'); DELETE FROM t;--", "\u{0}nul", "tab\tnew\nline", "ünïcødé 🪙", "$1", "\\x00"]

    func exercise(_ engine: Engine) throws {
        let connection = try engine.connect()
        let table = "t_\(UUID().uuidString.prefix(8).lowercased())"
        try connection.executeScript("CREATE TABLE \(table) (id BIGINT PRIMARY KEY, name TEXT, amount BIGINT, note TEXT)")
        defer { _ = try? connection.query("DROP TABLE \(table)") }
        for (index, text) in Self.hostile.enumerated() where !text.contains("\u{0}") || engine == .sqlite {
            try connection.query("INSERT INTO \(table) (id, name, amount, note) VALUES ($1, $2, $3, $4)",
                                 [.integer(Int64(index)), .text(text), .integer(Int64.max - Int64(index)), .null])
            #expect(connection.changes == 1)
        }
        let rows = try connection.query("SELECT id, name, amount, note FROM \(table) ORDER BY id")
        let expected = Self.hostile.enumerated().filter { !$0.element.contains("\u{0}") || engine == .sqlite }
        #expect(rows.count == expected.count, "the table survived every hostile string")
        for (row, (index, text)) in zip(rows, expected) {
            #expect(row == [.integer(Int64(index)), .text(text), .integer(Int64.max - Int64(index)), .null])
        }

        let duplicate = #expect(throws: DatabaseError.self) {
            try connection.query("INSERT INTO \(table) (id, name) VALUES ($1, $2)", [.integer(0), .text("again")])
        }
        #expect(duplicate?.isUniqueViolation == true, "\(String(describing: duplicate))")
        #expect(duplicate?.isRetriable == false)

        // Parameters used out of order and twice bind by number, not by first appearance.
        #expect(try connection.query("SELECT CAST($2 AS BIGINT), $1, CAST($2 AS BIGINT)", [.text("one"), .integer(2)])
                == [[.integer(2), .text("one"), .integer(2)]])

        try connection.query("BEGIN")
        try connection.query("UPDATE \(table) SET amount = $1", [.integer(7)])
        try connection.query("ROLLBACK")
        #expect(try connection.query("SELECT count(*) FROM \(table) WHERE amount = 7") == [[.integer(0)]])
    }

    @Test func sqliteRoundTripsConstraintsAndTransactions() throws { try exercise(.sqlite) }

    @Test(TestServices.postgres) func postgresRoundTripsConstraintsAndTransactions() throws { try exercise(.postgres) }

    @Test(TestServices.postgres) func aSerializationFailureIsRetriable() throws {
        let url = try TestServices.requirePostgres()
        let first = try PostgresConnection(url: url)
        let second = try PostgresConnection(url: url)
        let table = "s_\(UUID().uuidString.prefix(8).lowercased())"
        try first.executeScript("CREATE TABLE \(table) (id INT PRIMARY KEY, n INT); INSERT INTO \(table) VALUES (1, 0);")
        defer { _ = try? first.query("DROP TABLE \(table)") }
        try first.query("BEGIN ISOLATION LEVEL SERIALIZABLE")
        try second.query("BEGIN ISOLATION LEVEL SERIALIZABLE")
        #expect(try first.query("SELECT n FROM \(table) WHERE id = 1") == [[.integer(0)]])
        #expect(try second.query("SELECT n FROM \(table) WHERE id = 1") == [[.integer(0)]])
        try first.query("UPDATE \(table) SET n = n + 1 WHERE id = 1")
        try first.query("COMMIT")
        let error = #expect(throws: DatabaseError.self) { try second.query("UPDATE \(table) SET n = n + 1 WHERE id = 1") }
        #expect(error?.code == "40001")
        #expect(error?.isRetriable == true)
        try second.query("ROLLBACK")
    }

    /// Each distinct statement is prepared once per connection and reused with new parameters; one first seen inside
    /// a failed transaction fails with it and is prepared on its next use.
    @Test(TestServices.postgres) func postgresPreparesEachStatementOnce() throws {
        let connection = try Engine.postgres.connect()
        let square = "SELECT CAST($1 AS BIGINT) * CAST($1 AS BIGINT)"
        for value in Int64(1)...5 { #expect(try connection.query(square, [.integer(value)]) == [[.integer(value * value)]]) }
        let prepared = "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1"
        #expect(try connection.query(prepared, [.text(square)]) == [[.integer(1)]])

        try connection.query("BEGIN")
        #expect(throws: DatabaseError.self) { try connection.query("SELECT 1 / CAST($1 AS INT)", [.integer(0)]) }
        let late = "SELECT CAST($1 AS TEXT) || 'late'"
        #expect(throws: DatabaseError.self) { try connection.query(late, [.text("too ")]) } // the transaction is aborted
        try connection.query("ROLLBACK")
        #expect(try connection.query(late, [.text("now ")]) == [[.text("now late")]])
        #expect(try connection.query(prepared, [.text(late)]) == [[.integer(1)]])

        // COMMIT of a transaction that had failed rolls it back: an error, not a success.
        try connection.query("BEGIN")
        #expect(throws: DatabaseError.self) { try connection.query("SELECT 1 / CAST($1 AS INT)", [.integer(0)]) }
        let commit = #expect(throws: DatabaseError.self) { try connection.query("COMMIT") }
        #expect(commit?.code == "25P02")
        #expect(!connection.isInTransaction)

        let bytes = Data([0x00, 0x5c, 0x78, 0xff, 0x10])
        #expect(try connection.query("SELECT encode(CAST($1 AS BYTEA), 'hex')", [.blob(bytes)]) == [[.text("005c78ff10")]])
    }

    /// A constraint's error names the constraint, never the values: PostgreSQL's DETAIL ("Key (token)=(…) already exists")
    /// would carry a purchase token into logs and dead letters.
    func uniqueViolationQuotesNoValue(_ engine: Engine) throws {
        let connection = try engine.connect()
        let table = "u_\(UUID().uuidString.prefix(8).lowercased())"
        try connection.executeScript("CREATE TABLE \(table) (token TEXT PRIMARY KEY)")
        defer { _ = try? connection.query("DROP TABLE \(table)") }
        let token = "secret-token-\(UUID().uuidString)"
        try connection.query("INSERT INTO \(table) (token) VALUES ($1)", [.text(token)])
        let duplicate = #expect(throws: DatabaseError.self) { try connection.query("INSERT INTO \(table) (token) VALUES ($1)", [.text(token)]) }
        #expect(duplicate?.isUniqueViolation == true)
        #expect(!String(describing: duplicate).contains(token), "\(String(describing: duplicate))")
    }

    @Test func aSQLiteUniqueViolationDoesNotQuoteTheDuplicateValue() throws { try uniqueViolationQuotesNoValue(.sqlite) }

    @Test(TestServices.postgres) func aPostgresUniqueViolationDoesNotQuoteTheDuplicateValue() throws { try uniqueViolationQuotesNoValue(.postgres) }

    @Test(TestServices.postgres) func postgresRefusesNULInTextWithAnError() throws {
        let connection = try Engine.postgres.connect()
        let error = #expect(throws: DatabaseError.self) { try connection.query("SELECT $1::text", [.text("a\u{0}b")]) }
        #expect(error?.isRetriable == false)
    }

    /// `sslmode` in the store URL reaches libpq: the local cluster has no TLS, so `require` must fail to connect
    /// with libpq's own reason, and `disable` must connect.
    @Test(TestServices.postgres) func sslModeFromTheURLReachesLibpq() throws {
        let url = try TestServices.requirePostgres()
        let separator = url.contains("?") ? "&" : "?"
        _ = try PostgresConnection(url: url + separator + "sslmode=disable")
        let error = #expect(throws: DatabaseError.self) { _ = try PostgresConnection(url: url + separator + "sslmode=require") }
        #expect(error?.message.contains("SSL") == true, "\(String(describing: error))")
    }

    @Test func anUnreachablePostgresIsARetriableConnectionError() {
        let error = #expect(throws: DatabaseError.self) {
            _ = try PostgresConnection(url: "postgres://nobody@127.0.0.1:1/none", connectTimeout: 2)
        }
        #expect(error?.isRetriable == true && error?.isConnectionLost == true)
        #expect(error?.message.contains("127.0.0.1") == true)
    }

    @Test func aBusySQLiteDatabaseIsRetriable() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("iap-busy-\(UUID().uuidString).sqlite").path
        let holder = try SQLiteConnection(path: path)
        try holder.executeScript("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        let waiter = try SQLiteConnection(path: path, busyTimeout: .zero)
        try holder.query("BEGIN IMMEDIATE")
        let error = #expect(throws: DatabaseError.self) { try waiter.query("INSERT INTO t (id) VALUES ($1)", [.integer(1)]) }
        #expect(error?.isRetriable == true, "\(String(describing: error))")
        try holder.query("COMMIT")
        try waiter.query("INSERT INTO t (id) VALUES ($1)", [.integer(1)])
        #expect(try waiter.query("SELECT count(*) FROM t") == [[.integer(1)]])
    }

    @Test func aSQLiteWriterWaitsForTheHolderToCommit() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("iap-busy-\(UUID().uuidString).sqlite").path
        try SQLiteConnection(path: path).executeScript("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        let waiter = try SQLiteConnection(path: path, busyTimeout: .seconds(10))
        // Another connection takes the write lock and commits while the waiter waits for it: how long after does not
        // matter, only that the waiter is not refused meanwhile.
        let (held, committed) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        Thread.detachNewThread {
            #expect(throws: Never.self) {
                let holder = try SQLiteConnection(path: path)
                try holder.query("BEGIN IMMEDIATE")
                try holder.query("INSERT INTO t (id) VALUES ($1)", [.integer(1)])
                held.signal()
                Thread.sleep(forTimeInterval: 0.03)
                try holder.query("COMMIT")
            }
            committed.signal()
        }
        held.wait()
        try waiter.query("INSERT INTO t (id) VALUES ($1)", [.integer(2)])
        committed.wait()
        #expect(try waiter.query("SELECT id FROM t ORDER BY id") == [[.integer(1)], [.integer(2)]])
    }

    @Test func aSQLiteWriterGivesUpAfterItsBusyTimeout() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("iap-busy-\(UUID().uuidString).sqlite").path
        let holder = try SQLiteConnection(path: path)
        try holder.executeScript("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        let waiter = try SQLiteConnection(path: path, busyTimeout: .milliseconds(40))
        try holder.query("BEGIN IMMEDIATE")
        let error = #expect(throws: DatabaseError.self) { try waiter.query("INSERT INTO t (id) VALUES ($1)", [.integer(1)]) }
        #expect(error?.isRetriable == true, "\(String(describing: error))")
        try holder.query("ROLLBACK")
    }

    @Test func sqliteBusyPollsDoubleFrom20MicrosecondsToAMillisecondAndCountWhatWasSlept() {
        #expect((0..<8).map { SQLiteBusyPolls.pause(afterTries: $0) } == [20, 40, 80, 160, 320, 640, 1000, 1000])
        for tries in 0..<50 {
            #expect(SQLiteBusyPolls.slept(beforeTry: tries + 1) == SQLiteBusyPolls.slept(beforeTry: tries) + SQLiteBusyPolls.pause(afterTries: tries))
        }
        #expect(SQLiteBusyPolls.slept(beforeTry: 0) == 0)
    }

    @Test func aSQLiteParameterTheStatementDoesNotUseIsIgnored() throws {
        let connection = try Engine.sqlite.connect()
        // $2 appears first, $1 twice, $3 not at all: each binds by its number; the third is left out.
        let rows = try connection.query("SELECT $2 || '-' || $1 || '-' || $1", [.text("a"), .text("b"), .text("unused")])
        #expect(rows == [[.text("b-a-a")]])
    }
}

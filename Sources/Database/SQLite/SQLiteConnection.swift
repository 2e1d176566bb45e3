import CSQLite
import Foundation

/// An SQLite connection; owns its `sqlite3*` and closes it in `deinit`.
///
/// WAL journal, a busy timeout, foreign keys on. Not thread-safe by itself: use it from one thread at a
/// time (the purchase store gives each connection its own serial queue). Several processes may share
/// the database file; writers wait up to `busyTimeout`, then fail with a retriable error.
public final class SQLiteConnection: SQLConnection {
    private let handle: OpaquePointer
    private var statements: [String: OpaquePointer] = [:]

    public init(path: String, busyTimeout: Duration = .seconds(10)) throws {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let status = sqlite3_open_v2(path, &handle, flags, nil)
        guard status == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            if let handle { sqlite3_close_v2(handle) }
            throw DatabaseError(code: String(status), message: "open \(path): \(message)", isRetriable: false)
        }
        self.handle = handle
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, Int32(busyTimeout.components.seconds * 1000))
        try executeScript("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
    }

    public var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    deinit {
        statements.values.forEach { sqlite3_finalize($0) }
        sqlite3_close_v2(handle)
    }

    public var changes: Int { Int(sqlite3_changes(handle)) }

    public func executeScript(_ sql: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        let status = sqlite3_exec(handle, sql, nil, nil, &message)
        if status != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(message)
            throw error(status, text)
        }
    }

    @discardableResult
    public func query(_ sql: String, _ parameters: [SQLValue]) throws -> [SQLRow] {
        let statement = try prepared(sql)
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        for (index, parameter) in parameters.enumerated() {
            // SQLite treats `$N` as a *named* parameter numbered by first appearance, not as position N:
            // look the name up, so `$3` binds the third value wherever it appears first.
            let position = sqlite3_bind_parameter_index(statement, "$\(index + 1)")
            guard position > 0 else { continue }
            let status: Int32
            switch parameter {
            case .null: status = sqlite3_bind_null(statement, position)
            case .integer(let value): status = sqlite3_bind_int64(statement, position, value)
            case .real(let value): status = sqlite3_bind_double(statement, position, value)
            case .text(let value):
                // With an explicit length: an embedded NUL must not cut the text short.
                let bytes = Array(value.utf8)
                status = bytes.withUnsafeBufferPointer { buffer in
                    buffer.withMemoryRebound(to: CChar.self) { chars in
                        // An empty array has no base address; a null pointer would bind NULL, not "".
                        guard let base = chars.baseAddress else { return sqlite3_bind_text(statement, position, "", 0, sqliteTransient) }
                        return sqlite3_bind_text(statement, position, base, Int32(chars.count), sqliteTransient)
                    }
                }
            case .blob(let value):
                status = value.withUnsafeBytes { sqlite3_bind_blob(statement, position, $0.baseAddress, Int32($0.count), sqliteTransient) }
            }
            guard status == SQLITE_OK else { throw error(status, "bind parameter \(position)") }
        }
        var rows: [SQLRow] = []
        while true {
            let status = sqlite3_step(statement)
            if status == SQLITE_DONE { break }
            guard status == SQLITE_ROW else { throw error(status, String(cString: sqlite3_errmsg(handle))) }
            rows.append((0..<sqlite3_column_count(statement)).map { column(statement, $0) })
        }
        return rows
    }

    private func column(_ statement: OpaquePointer, _ index: Int32) -> SQLValue {
        switch sqlite3_column_type(statement, index) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, index))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, index))
        case SQLITE_TEXT:
            let count = Int(sqlite3_column_bytes(statement, index))
            guard count > 0, let text = sqlite3_column_text(statement, index) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(statement, index))
            guard count > 0, let bytes = sqlite3_column_blob(statement, index) else { return .blob(Data()) }
            return .blob(Data(bytes: bytes, count: count))
        default: return .null
        }
    }

    private func prepared(_ sql: String) throws -> OpaquePointer {
        if let statement = statements[sql] { return statement }
        var statement: OpaquePointer?
        let status = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard status == SQLITE_OK, let statement else { throw error(status, "prepare: \(String(cString: sqlite3_errmsg(handle)))") }
        statements[sql] = statement
        return statement
    }

    private func error(_ status: Int32, _ message: String) -> DatabaseError {
        let primary = status & 0xFF
        // Another connection holds the lock: waiting longer or trying again can succeed.
        let retriable = primary == SQLITE_BUSY || primary == SQLITE_LOCKED
        return DatabaseError(code: String(status), message: message, isRetriable: retriable)
    }
}

/// `SQLITE_TRANSIENT` (a cast macro Swift cannot import): SQLite copies the bound bytes.
private let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

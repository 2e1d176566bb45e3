import CSQLite
import Foundation

/// An SQLite connection; owns its `sqlite3*` and closes it in `deinit`.
///
/// WAL journal, a busy timeout, foreign keys on. Not thread-safe by itself: use it from one thread at a
/// time (the purchase store gives each connection its own serial queue). Several processes may share
/// the database file; writers wait up to `busyTimeout`, then fail with a retriable error.
public final class SQLiteConnection: SQLConnection {
    private let handle: OpaquePointer
    private typealias PreparedStatement = (statement: OpaquePointer, positions: [Int32])
    private var statements: [String: PreparedStatement] = [:]

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
        Self.waitWhileBusy(handle, upTo: busyTimeout)
        try executeScript("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
    }

    public var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    deinit {
        statements.values.forEach { sqlite3_finalize($0.statement) }
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
        let (statement, positions) = try prepared(sql)
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        for (index, parameter) in parameters.enumerated() {
            let position = index < positions.count ? positions[index] : 0
            guard position > 0 else { continue }
            let status: Int32
            switch parameter {
            case .null: status = sqlite3_bind_null(statement, position)
            case .integer(let value): status = sqlite3_bind_int64(statement, position, value)
            case .real(let value): status = sqlite3_bind_double(statement, position, value)
            case .text(var value):
                // With an explicit length: an embedded NUL must not cut the text short. `withUTF8` reads a native string's
                // bytes in place (a bridged one is made native first).
                status = value.withUTF8 { buffer in
                    buffer.withMemoryRebound(to: CChar.self) { chars in
                        // An empty string has no base address; a null pointer would bind NULL, not "".
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

    /// The statement for `sql`, prepared once, and where each of its values binds.
    private func prepared(_ sql: String) throws -> PreparedStatement {
        if let prepared = statements[sql] { return prepared }
        var statement: OpaquePointer?
        let status = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard status == SQLITE_OK, let statement else { throw error(status, "prepare: \(String(cString: sqlite3_errmsg(handle)))") }
        let prepared = (statement, Self.positions(statement))
        statements[sql] = prepared
        return prepared
    }

    /// Where the statement's `$1`, `$2` … bind, by value: SQLite treats `$N` as a *named* parameter numbered by first
    /// appearance, not as position N, so `$3` binds the third value wherever it appears first. Looked up once per
    /// statement, not per value (a batch's statement binds thousands). 0: the statement does not use that value.
    private static func positions(_ statement: OpaquePointer) -> [Int32] {
        let count = sqlite3_bind_parameter_count(statement)
        guard count > 0 else { return [] }
        var positions: [Int32] = []
        for position in 1...count {
            guard let name = sqlite3_bind_parameter_name(statement, position), name[0] == CChar(UInt8(ascii: "$")),
                  let number = Int(String(cString: name + 1)), number >= 1, number <= 1 << 20 else { continue }
            if positions.count < number { positions += repeatElement(0, count: number - positions.count) }
            positions[number - 1] = position
        }
        return positions
    }

    /// While another connection (another process: each worker has one writer) holds the write lock, waits in short
    /// polls, up to `timeout`. SQLite's own busy timeout sleeps 1, 2, 5, 10 … 100 ms between tries: a waiter then
    /// oversleeps the holder's commit and the lock sits idle, which the benchmark showed as a quarter of the machine
    /// idle and seconds of p99. Polls start at 20 µs and double up to 1 ms; the time counted is the time slept, as
    /// SQLite counts it.
    private static func waitWhileBusy(_ handle: OpaquePointer, upTo timeout: Duration) {
        let microseconds = max(0, timeout.components.seconds * 1_000_000 + timeout.components.attoseconds / 1_000_000_000_000)
        guard microseconds > 0 else {
            sqlite3_busy_timeout(handle, 0)
            return
        }
        // The budget travels as the context pointer's value: the handler keeps no state, and nothing needs freeing.
        sqlite3_busy_handler(handle, { context, count in
            let budget = Int64(Int(bitPattern: context))
            let pause = SQLiteBusyPolls.pause(afterTries: Int(count))
            guard SQLiteBusyPolls.slept(beforeTry: Int(count)) + pause <= budget else { return 0 }
            usleep(UInt32(pause))
            return 1
        }, UnsafeMutableRawPointer(bitPattern: Int(microseconds)))
    }

    private func error(_ status: Int32, _ message: String) -> DatabaseError {
        let primary = status & 0xFF
        // Another connection holds the lock: waiting longer or trying again can succeed.
        let retriable = primary == SQLITE_BUSY || primary == SQLITE_LOCKED
        return DatabaseError(code: String(status), message: message, isRetriable: retriable)
    }
}

/// The pauses between tries of a write lock another connection holds, in microseconds.
enum SQLiteBusyPolls {
    static let first: Int64 = 20
    static let longest: Int64 = 1000
    /// Pauses that double before they reach `longest`: 20 µs × 2⁶ would pass 1 ms.
    static let doublings = 6

    /// The pause before try `tries + 1`: 20 µs, doubling, then 1 ms.
    static func pause(afterTries tries: Int) -> Int64 { tries >= doublings ? longest : first << tries }

    /// The time slept before try `tries + 1`, all pauses so far.
    static func slept(beforeTry tries: Int) -> Int64 {
        let doubled = min(tries, doublings)
        // 20 + 40 + … for the doubling pauses, then 1 ms each.
        return first * ((1 << doubled) - 1) + Int64(tries - doubled) * longest
    }
}

/// `SQLITE_TRANSIENT` (a cast macro Swift cannot import): SQLite copies the bound bytes.
private let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

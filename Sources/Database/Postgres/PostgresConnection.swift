import CLibPQ
import Foundation

/// A PostgreSQL connection through libpq; owns its `PGconn*` and closes it in `deinit`.
/// Parameters are always sent separately from the SQL, never spliced into it. Each distinct statement is
/// prepared once per connection (`PQprepare`) and executed by name afterwards, so that the server parses and
/// plans it once rather than per call: the pipeline runs the same few statements for every purchase.
/// Not thread-safe by itself: use it from one thread at a time.
public final class PostgresConnection: SQLConnection {
    private let handle: OpaquePointer
    public private(set) var changes = 0
    /// The server-side name of each statement prepared on this connection, by its SQL.
    private var preparedNames: [String: String] = [:]

    /// - Parameter url: a libpq connection string or URI (`postgres://user@host:port/db?sslmode=require`);
    ///   `sslmode` and the other libpq parameters pass through unchanged.
    /// - Parameter password: given apart from the URL (read from a secret file), so that it never appears in a URL
    ///   that might be logged; otherwise libpq's own sources apply (`PGPASSWORD`, `~/.pgpass`, `PGPASSFILE`).
    public init(url: String, password: String? = nil, connectTimeout: Int = 10) throws {
        let separator = url.contains("?") ? "&" : "?"
        let target = url.hasPrefix("postgres") && !url.contains("connect_timeout") ? url + "\(separator)connect_timeout=\(connectTimeout)" : url
        // expand_dbname: the URI in "dbname" is expanded; the password keyword after it takes precedence.
        let keywords = password == nil ? ["dbname"] : ["dbname", "password"]
        let values = [target] + (password.map { [$0] } ?? [])
        let connection = withCStrings(keywords) { keywordPointers in
            withCStrings(values) { valuePointers in PQconnectdbParams(keywordPointers, valuePointers, 1) }
        }
        guard let handle = connection else {
            throw DatabaseError(code: "08000", message: "out of memory", isRetriable: true, isConnectionLost: true)
        }
        guard PQstatus(handle) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines)
            PQfinish(handle)
            // The message can name the host but never the password: libpq does not echo it.
            throw DatabaseError(code: "08001", message: "cannot connect: \(message)", isRetriable: true, isConnectionLost: true)
        }
        self.handle = handle
        // Error messages without their DETAIL and CONTEXT: a unique violation's DETAIL quotes the key ("Key (purchase_token)=
        // (…) already exists"), and the messages end up in logs and dead letters. The SQLSTATE and the primary text remain.
        PQsetErrorVerbosity(handle, PQERRORS_TERSE)
        // Statements are prepared (see `preparedName`), and PostgreSQL would otherwise switch a statement to a generic
        // plan after five runs, made from the statistics of that moment: on a new, empty table that plan scans
        // `purchases` by an index whose first column is the store (every row) and stays so as the table grows. A
        // custom plan per run, as unprepared statements get, keeps the lookups on their keys; only the parsing is saved.
        try executeScript("SET plan_cache_mode = force_custom_plan")
    }

    deinit { PQfinish(handle) }

    /// Also while a failed transaction waits for its ROLLBACK.
    public var isInTransaction: Bool {
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// The server's version number, e.g. 150018.
    public var serverVersion: Int { Int(PQserverVersion(handle)) }

    public func executeScript(_ sql: String) throws {
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        try check(result)
    }

    @discardableResult
    public func query(_ sql: String, _ parameters: [SQLValue]) throws -> [SQLRow] {
        // Parameters travel as C strings: a NUL would silently cut one short, and PostgreSQL text
        // cannot hold it anyway. Refuse it as the server would (22021).
        for (index, value) in parameters.enumerated() {
            if case .text(let text) = value, text.utf8.contains(0) {
                throw DatabaseError(code: "22021", message: "parameter $\(index + 1) contains a NUL byte", isRetriable: false)
            }
        }
        // Text format for every parameter; blobs as bytea hex.
        let texts: [String?] = parameters.map { value in
            switch value {
            case .null: nil
            case .integer(let integer): String(integer)
            case .real(let real): String(real)
            case .text(let text): text
            case .blob(let data): Self.byteaHex(data)
            }
        }
        let name = try preparedName(sql, parameterCount: texts.count)
        let cStrings = texts.map { $0.map { strdup($0) } ?? nil }
        defer { cStrings.forEach { free($0) } }
        let pointers = cStrings.map { UnsafePointer<CChar>($0) }
        let result = pointers.withUnsafeBufferPointer { PQexecPrepared(handle, name, Int32(texts.count), $0.baseAddress, nil, nil, 0) }
        defer { PQclear(result) }
        try check(result)
        if sql == "COMMIT", let status = PQcmdStatus(result), String(cString: status) == "ROLLBACK" {
            // PostgreSQL answers COMMIT of a transaction that had failed with a rollback, not an error.
            throw DatabaseError(code: "25P02", message: "the transaction had failed; COMMIT rolled it back", isRetriable: true)
        }
        changes = Int(String(cString: PQcmdTuples(result))) ?? 0
        var rows: [SQLRow] = []
        let rowCount = PQntuples(result)
        let columnCount = PQnfields(result)
        rows.reserveCapacity(Int(rowCount))
        for row in 0..<rowCount {
            rows.append((0..<columnCount).map { column in
                if PQgetisnull(result, row, column) == 1 { return .null }
                let text = String(cString: PQgetvalue(result, row, column))
                // Integer columns come back as integers; everything else as text.
                switch PQftype(result, column) {
                case 20, 21, 23: return Int64(text).map(SQLValue.integer) ?? .text(text) // int8, int2, int4
                case 16: return .integer(text == "t" ? 1 : 0) // bool
                default: return .text(text)
                }
            })
        }
        return rows
    }

    /// The name `sql` is prepared under on this connection, preparing it on first use. A failed preparation is not
    /// remembered (e.g. inside a transaction that failed: the next use prepares it again).
    private func preparedName(_ sql: String, parameterCount: Int) throws -> String {
        if let name = preparedNames[sql] { return name }
        let name = "iap_\(preparedNames.count + 1)"
        let result = PQprepare(handle, name, sql, Int32(parameterCount), nil)
        defer { PQclear(result) }
        try check(result)
        preparedNames[sql] = name
        return name
    }

    /// bytea's hex input form: `\x` and two lowercase digits per byte.
    static func byteaHex(_ data: Data) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var bytes: [UInt8] = [UInt8(ascii: "\\"), UInt8(ascii: "x")]
        bytes.reserveCapacity(2 + data.count * 2)
        for byte in data {
            bytes.append(digits[Int(byte >> 4)])
            bytes.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private func check(_ result: OpaquePointer?) throws {
        let status = result.map(PQresultStatus) ?? PGRES_FATAL_ERROR
        guard status != PGRES_COMMAND_OK, status != PGRES_TUPLES_OK, status != PGRES_EMPTY_QUERY else { return }
        let lost = PQstatus(handle) != CONNECTION_OK
        let sqlstate = result.flatMap { PQresultErrorField($0, Int32(UInt8(ascii: "C"))) }.map { String(cString: $0) } ?? (lost ? "08006" : "XX000")
        let message = String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines)
        // Class 08 (connection), 40001 (serialization failure), 40P01 (deadlock), 55P03 (a lock not had within
        // `lock_timeout`), 57P01-03 (shutdown), 53xxx (resources).
        let retriable = lost || sqlstate.hasPrefix("08") || sqlstate == "40001" || sqlstate == "40P01" || sqlstate == "55P03"
            || sqlstate.hasPrefix("57P0") || sqlstate.hasPrefix("53")
        throw DatabaseError(code: sqlstate, message: message, isRetriable: retriable, isConnectionLost: lost)
    }
}

/// A NULL-terminated array of C strings, valid during `body`.
private func withCStrings<T>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> T) -> T {
    let duplicates = strings.map { strdup($0) }
    defer { duplicates.forEach { free($0) } }
    let pointers: [UnsafePointer<CChar>?] = duplicates.map { $0.map { UnsafePointer($0) } } + [nil]
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}

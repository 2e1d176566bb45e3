import Foundation

/// A value bound to or read from a SQL statement, the same for SQLite and PostgreSQL.
public enum SQLValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob(Data)

    public var int64: Int64? {
        switch self {
        case .integer(let value): value
        case .text(let text): Int64(text)
        case .real(let value): Int64(exactly: value)
        default: nil
        }
    }

    public var string: String? {
        switch self {
        case .text(let text): text
        case .integer(let value): String(value)
        default: nil
        }
    }

    public var isNull: Bool { self == .null }
}

/// One result row, columns in SELECT order.
public typealias SQLRow = [SQLValue]

/// A database failure with the engine's own code (SQLSTATE for PostgreSQL, the extended result code
/// for SQLite) and whether the same work may succeed when tried again (connection lost, serialization
/// failure, deadlock, lock busy).
public struct DatabaseError: Error, Sendable, CustomStringConvertible {
    public let code: String
    public let message: String
    public let isRetriable: Bool
    /// The connection is unusable; a new one is needed.
    public let isConnectionLost: Bool

    public init(code: String, message: String, isRetriable: Bool, isConnectionLost: Bool = false) {
        self.code = code
        self.message = message
        self.isRetriable = isRetriable
        self.isConnectionLost = isConnectionLost
    }

    /// A unique constraint was violated (SQLSTATE 23505 / SQLITE_CONSTRAINT_UNIQUE or _PRIMARYKEY).
    public var isUniqueViolation: Bool { code == "23505" || code == "2067" || code == "1555" }

    public var description: String { "database error \(code): \(message)\(isRetriable ? " (retriable)" : "")" }
}

/// What both engines offer the purchase store: statements with positional parameters written `$1, $2, …`
/// (PostgreSQL's syntax, which SQLite also accepts), and transactions.
public protocol SQLConnection: AnyObject {
    /// Runs one statement; returns its rows (empty for statements without results).
    @discardableResult
    func query(_ sql: String, _ parameters: [SQLValue]) throws -> [SQLRow]
    /// Runs statements without parameters (e.g. a migration script).
    func executeScript(_ sql: String) throws
    /// Rows changed by the last statement.
    var changes: Int { get }
    /// Whether a transaction is open on the connection (begun and neither committed nor rolled back).
    var isInTransaction: Bool { get }
}

extension SQLConnection {
    @discardableResult
    public func query(_ sql: String) throws -> [SQLRow] { try query(sql, []) }
}

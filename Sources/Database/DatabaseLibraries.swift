import CLibPQ
import CSQLite

/// The libpq loaded at run time.
public enum PostgresLibrary {
    /// e.g. `15.18` (`PQlibVersion()` is 150018).
    public static var version: String {
        let number = Int(PQlibVersion())
        return "\(number / 10000).\(number % 10000)"
    }
}

/// The SQLite loaded at run time.
public enum SQLiteLibrary {
    /// e.g. `3.40.1`.
    public static var version: String { String(cString: sqlite3_libversion()) }
}

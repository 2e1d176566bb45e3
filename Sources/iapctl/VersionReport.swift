import Crypto
import Database
import Kafka

/// The versions of the C libraries this process loaded.
struct VersionReport {
    var librdkafka: String
    var openSSL: String
    var libpq: String
    var sqlite: String

    static func current() -> VersionReport {
        VersionReport(librdkafka: KafkaLibrary.version, openSSL: CryptoLibrary.version, libpq: PostgresLibrary.version, sqlite: SQLiteLibrary.version)
    }

    var text: String {
        """
        librdkafka \(librdkafka)
        openssl \(openSSL)
        libpq \(libpq)
        sqlite \(sqlite)
        """
    }
}

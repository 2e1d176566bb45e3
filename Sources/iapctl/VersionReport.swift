import CLibPQ
import COpenSSL
import CSQLite
import Kafka

/// The versions of the C libraries this process loaded.
struct VersionReport {
    var librdkafka: String
    var openSSL: String
    var libpq: String
    var sqlite: String

    static func current() -> VersionReport {
        let pq = Int(PQlibVersion()) // e.g. 150018 for 15.18
        return VersionReport(
            librdkafka: KafkaLibrary.version,
            openSSL: String(cString: OpenSSL_version(OPENSSL_VERSION)),
            libpq: "\(pq / 10000).\(pq % 10000)",
            sqlite: String(cString: sqlite3_libversion())
        )
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

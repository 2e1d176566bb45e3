import CRdKafka

/// The librdkafka loaded at run time.
public enum KafkaLibrary {
    /// The oldest librdkafka this project works with: 2.0.x cannot parse the multi-byte tagged
    /// fields that current brokers send (librdkafka 2.2.0 changelog, #4278).
    public static let minimumVersion = (major: 2, minor: 2, patch: 0)

    /// e.g. `2.8.0`.
    public static var version: String { String(cString: rd_kafka_version_str()) }

    /// `(major, minor, patch)` from `rd_kafka_version()` (hex `0xMMmmrrpp`).
    public static var versionComponents: (major: Int, minor: Int, patch: Int) {
        let raw = Int(rd_kafka_version())
        return ((raw >> 24) & 0xff, (raw >> 16) & 0xff, (raw >> 8) & 0xff)
    }

    /// Throws `unsupportedVersion` when the loaded librdkafka is older than `minimumVersion`.
    /// Every executable calls this first.
    public static func requireSupportedVersion() throws {
        let (major, minor, patch) = versionComponents
        if (major, minor, patch) < minimumVersion {
            throw KafkaError(
                code: .unsupportedVersion,
                message: "librdkafka \(version) is loaded, but \(minimumVersion.major).\(minimumVersion.minor).\(minimumVersion.patch) or newer is required "
                    + "(older versions fail against current brokers with 'ApiVersionRequest failed: Local: Read underflow'); run `make bootstrap`"
            )
        }
    }
}

import Foundation

/// librdkafka configuration properties (see librdkafka's CONFIGURATION.md).
///
/// Any property can be set, so SASL, SSL and tuning are plain librdkafka configuration.
/// Sources, lowest precedence first: the defaults of the client, the environment
/// (`KAFKA_BOOTSTRAP_SERVERS`, and generally `KAFKA_<PROPERTY>` with dots written as
/// underscores), then explicit `key=value` settings such as `--kafka` flags.
public struct KafkaConfiguration: Sendable, Equatable {
    /// The properties, by librdkafka name (e.g. `bootstrap.servers`).
    public var properties: [String: String]

    public init(_ properties: [String: String] = [:]) {
        self.properties = properties
    }

    /// `bootstrap.servers`.
    public var bootstrapServers: String? {
        get { properties["bootstrap.servers"] }
        set { properties["bootstrap.servers"] = newValue }
    }

    public subscript(property: String) -> String? {
        get { properties[property] }
        set { properties[property] = newValue }
    }

    /// Properties read from `KAFKA_*` environment variables: `KAFKA_SASL_MECHANISMS=PLAIN`
    /// becomes `sasl.mechanisms=PLAIN`.
    public static func fromEnvironment(_ environment: [String: String]) -> KafkaConfiguration {
        var configuration = KafkaConfiguration()
        for (name, value) in environment where name.hasPrefix("KAFKA_") && name.count > "KAFKA_".count {
            let property = name.dropFirst("KAFKA_".count).lowercased().replacingOccurrences(of: "_", with: ".")
            configuration.properties[property] = value
        }
        return configuration
    }

    /// Applies `key=value` settings (e.g. from repeated `--kafka` flags) over these properties.
    /// - Throws: `KafkaError.Code.configuration` for a setting without `=` or with an empty key.
    public mutating func apply(settings: [String]) throws {
        for setting in settings {
            guard let equals = setting.firstIndex(of: "="), equals != setting.startIndex else {
                throw KafkaError(code: .configuration, message: "expected key=value, got '\(setting)'")
            }
            properties[String(setting[..<equals])] = String(setting[setting.index(after: equals)...])
        }
    }

    /// These properties with `other`'s set over them.
    public func merging(_ other: KafkaConfiguration) -> KafkaConfiguration {
        KafkaConfiguration(properties.merging(other.properties) { _, new in new })
    }

    /// These properties with `defaults` filled in where a property is not set.
    func withDefaults(_ defaults: [String: String]) -> KafkaConfiguration {
        KafkaConfiguration(defaults.merging(properties) { _, set in set })
    }
}

import Crypto
import Foundation
import JSON
import JSONSchema
import Kafka
import PurchaseEvents
import PurchaseStore
import Stages
import StoreVerification
import WorkerRuntime

/// What the worker executables share: settings, start-up, and running the stage until SIGTERM/SIGINT.
public enum WorkerApp {
    public static let commonSettings: [Setting] = [
        Setting("--config", env: "IAP_CONFIG", help: "a file of NAME=value lines (the environment names below)"),
        Setting("--brokers", env: "KAFKA_BOOTSTRAP_SERVERS", help: "Kafka bootstrap servers, host:port[,host:port]"),
        Setting("--store", env: "IAP_STORE_URL", default: "sqlite:iap-pipeline.sqlite",
                help: "purchase store: sqlite:PATH or postgres://user@host:port/db?sslmode=… (password from PGPASSWORD or ~/.pgpass)"),
        Setting("--topic-prefix", env: "IAP_TOPIC_PREFIX", default: "", help: "prefix of every topic name"),
        Setting("--group-prefix", env: "IAP_GROUP_PREFIX", default: "iap-", help: "prefix of consumer group ids (group = prefix + stage)"),
        Setting("--schemas-dir", env: "IAP_SCHEMAS_DIR", help: "directory of the event schemas (found next to the build or in /usr/share/iap-pipeline/schemas)"),
        Setting("--log-level", env: "IAP_LOG_LEVEL", default: "info", help: "debug, info, warning or error"),
        Setting("--shutdown-timeout", env: "IAP_SHUTDOWN_TIMEOUT", default: "30", help: "seconds to finish in-flight work on SIGTERM"),
    ]

    /// Everything a worker needs, resolved from its settings.
    public struct Environment: Sendable {
        public let settings: Settings
        public let kafka: KafkaConfiguration
        public let schemas: JSONSchemaRegistry
        public let store: SQLPurchaseStore
        public let logger: Logger
        public let shutdownTimeout: Duration
        public let topicPrefix: String
        public let groupPrefix: String

        public func context(stage: String) -> StageContext {
            StageContext(codec: EventCodec(schemas: schemas, source: "/iap-pipeline/\(stage)", topicPrefix: topicPrefix), logger: logger)
        }

        public func runner(for stage: any MessageStage) throws -> StageRunner {
            let consumer = try KafkaConsumer(configuration: .init(
                kafka: kafka, groupID: groupPrefix + stage.name, topics: stage.topics, shutdownTimeout: shutdownTimeout,
                onEvent: { [logger] event in
                    switch event {
                    case .assigned(let partitions): logger.info("partitions assigned", ["partitions": partitions.map(\.description).joined(separator: ",")])
                    case .revoked(let partitions): logger.info("partitions revoked", ["partitions": partitions.map(\.description).joined(separator: ",")])
                    case .abandoned(let partition): logger.warning("in-flight message abandoned at shutdown", ["partition": partition.description])
                    case .error(let error): logger.warning("kafka", ["error": error.description])
                    }
                }))
            let producer = try KafkaProducer(configuration: .init(kafka: kafka))
            return StageRunner(stage: stage, consumer: consumer, producer: producer,
                               codec: EventCodec(schemas: schemas, source: "/iap-pipeline/\(stage.name)", topicPrefix: topicPrefix), logger: logger)
        }
    }

    /// Parses settings, checks librdkafka, opens the store (migrating it), then runs `body`'s services
    /// until SIGTERM/SIGINT. Exit codes: 0 after a graceful shutdown, 1 on a runtime failure, 2 on a
    /// configuration error (the message names the setting).
    public static func main(command: String, summary: String, settings definitions: [Setting],
                            body: @escaping @Sendable (Environment) async throws -> [any Service]) async -> Int32 {
        let all = commonSettings + definitions
        do {
            try KafkaLibrary.requireSupportedVersion()
            let settings = try Settings(arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment,
                                        definitions: all)
            if settings.helpRequested {
                print(Settings.help(command: command, summary: summary, definitions: all))
                return 0
            }
            let level: Logger.Level = switch settings.string("--log-level") {
            case "debug": .debug
            case "warning": .warning
            case "error": .error
            case "info": .info
            default: throw SettingsError("--log-level (IAP_LOG_LEVEL) must be debug, info, warning or error")
            }
            let logger = Logger(stage: command, minimum: level)
            var kafka = KafkaConfiguration.fromEnvironment(ProcessInfo.processInfo.environment)
            if let brokers = settings.string("--brokers") { kafka.bootstrapServers = brokers }
            try kafka.apply(settings: settings.kafkaSettings)
            guard kafka.bootstrapServers?.isEmpty == false else { throw SettingsError("--brokers (KAFKA_BOOTSTRAP_SERVERS) is required") }
            let schemas = try JSONSchemaRegistry.eventSchemas(directory: settings.string("--schemas-dir"))
            let store = try SQLPurchaseStore(url: try settings.required("--store"))
            let applied = try await store.migrate()
            logger.info("started", ["librdkafka": KafkaLibrary.version, "store": store.location, "migrationsApplied": applied.map(String.init).joined(separator: ",")])
            let environment = Environment(
                settings: settings, kafka: kafka, schemas: schemas, store: store, logger: logger,
                shutdownTimeout: .milliseconds(Int64((try settings.seconds("--shutdown-timeout") ?? 30) * 1000)),
                topicPrefix: settings.string("--topic-prefix") ?? "", groupPrefix: settings.string("--group-prefix") ?? "iap-")
            let services = try await body(environment)
            try await ServiceGroup(services: services).run()
            logger.info("stopped")
            return 0
        } catch {
            FileHandle.standardError.write(Data("\(command): \(error)\n".utf8))
            // Configuration problems (each message names the setting) exit 2; failures at run time exit 1.
            return error is SettingsError || error is VerifierConfigurationError || error is CatalogError ? 2 : 1
        }
    }

    /// Loads certificates named by a list setting (files, PEM or DER).
    static func certificates(_ paths: [String], setting: String) throws -> [Certificate] {
        try paths.flatMap { path -> [Certificate] in
            guard let data = FileManager.default.contents(atPath: path) else { throw SettingsError("\(setting): cannot read \(path)") }
            do { return try Certificate.load(pemOrDER: data) } catch { throw SettingsError("\(setting): \(path): \(error)") }
        }
    }
}

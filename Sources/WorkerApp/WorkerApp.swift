import Crypto
import Database
import Foundation
import HTTPServer
import Metrics
import JSON
import JSONSchema
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import StoreVerification
import WorkerRuntime

/// What the executables share: settings, start-up, the operations endpoints, and running services
/// until SIGTERM/SIGINT.
public enum WorkerApp {
    /// Settings of every executable.
    public static let processSettings: [Setting] = [
        Setting("--config", env: "IAP_CONFIG", help: "a file of NAME=value lines (the environment names below)"),
        Setting("--brokers", env: "KAFKA_BOOTSTRAP_SERVERS", help: "Kafka bootstrap servers, host:port[,host:port]"),
        Setting("--topic-prefix", env: "IAP_TOPIC_PREFIX", default: "", help: "prefix of every topic name"),
        Setting("--schemas-dir", env: "IAP_SCHEMAS_DIR", help: "directory of the event schemas (found next to the build or in /usr/share/iap-pipeline/schemas)"),
        Setting("--log-level", env: "IAP_LOG_LEVEL", default: "info", help: "debug, info, warning or error"),
        Setting("--shutdown-timeout", env: "IAP_SHUTDOWN_TIMEOUT", default: "30", help: "seconds to finish in-flight work on SIGTERM"),
        Setting("--http-host", env: "IAP_HTTP_HOST", default: "0.0.0.0", help: "address of the HTTP endpoints (/metrics, /healthz, /readyz)"),
        Setting("--http-port-file", env: "IAP_HTTP_PORT_FILE",
                help: "once listening, write the ports bound to this file, as JSON {\"http\": N, \"operations\": N}: for supervisors and harnesses that start it on port 0"),
    ]

    /// Settings of the four workers (on top of `processSettings`).
    public static let workerSettings: [Setting] = [
        Setting("--http-port", env: "IAP_HTTP_PORT", help: "serve /metrics, /healthz and /readyz on this port (off when unset; 0 picks a free port)"),
        Setting("--store", env: "IAP_STORE_URL", default: "sqlite:iap-pipeline.sqlite",
                help: "purchase store: sqlite:PATH or postgres://user@host:port/db?sslmode=… (password from PGPASSWORD or ~/.pgpass)"),
        Setting("--store-password-file", env: "IAP_STORE_PASSWORD_FILE",
                help: "file holding the PostgreSQL password (a mounted secret); else PGPASSWORD or ~/.pgpass"),
        Setting("--store-connections", env: "IAP_STORE_CONNECTIONS", default: String(SQLPurchaseStore.defaultConnections),
                help: "PostgreSQL connections at most (1 to 64), opened as the batches of different partitions overlap: one per partition a replica handles lets them commit side by side (SQLite: always one)"),
        Setting("--group-prefix", env: "IAP_GROUP_PREFIX", default: "iap-", help: "prefix of consumer group ids (group = prefix + stage)"),
        Setting("--store-totals-interval", env: "IAP_STORE_TOTALS_INTERVAL", default: "300",
                help: "seconds between counts of every purchase by state for /metrics' iap_purchases (finished, rejected, refund_due, revoked: a count reads the whole table); verified and granted are read at each scrape"),
        Setting("--store-gauges", env: "IAP_STORE_GAUGES", default: "true",
                help: "true: /metrics reports the store-wide gauges (iap_purchases, iap_oldest_unfinished_purchase_age_seconds, iap_parked_messages, …), read from the store at each scrape; every worker reporting them reports the same figures, so aggregate them with max, not sum; false: this worker leaves them out and spends no reads on them"),
        Setting("--statistics-interval", env: "IAP_STATISTICS_INTERVAL", default: "5",
                help: "seconds between librdkafka statistics (consumer lag in /metrics); 0 turns them off"),
        // The window's default is the batch's: a batch takes at most what the window lets in.
        Setting("--max-in-flight", env: "IAP_MAX_IN_FLIGHT", default: String(StageRunner.Configuration.defaultMaxBatch),
                help: "messages per partition handled while earlier outputs await the broker's ack (1 = one at a time)"),
        Setting("--max-batch", env: "IAP_MAX_BATCH", default: String(StageRunner.Configuration.defaultMaxBatch),
                help: "messages of a partition waiting to be handled that a stage takes at once, in one database transaction (1 = one at a time)"),
        Setting("--leave-group", env: "IAP_LEAVE_GROUP", default: "true",
                help: "true: a graceful shutdown ends with a LeaveGroup, so the group reassigns at once; false: the member goes silently and is expelled when its session ends (10 s), for brokers that mishandle a LeaveGroup during a rebalance (the local Tansu 0.6)"),
        Setting("--group-stall-seconds", env: "IAP_GROUP_STALL_SECONDS", default: "60",
                help: "seconds (at least 30) a stage may be without partitions (while its group has no more members than partitions), or hold another slice than its share, before it is reported stalled and rejoins"),
        Setting("--rejoin-stalled-group", env: "IAP_REJOIN_STALLED_GROUP", default: "true",
                help: "true: a stage whose group stalled past --group-stall-seconds rejoins it as a new member, so the coordinator assigns every partition anew (what the local Tansu 0.6 needs); false: a stall is only reported"),
        Setting("--retry-budget", env: "IAP_RETRY_BUDGET", default: "300",
                help: "seconds a message failing transiently is retried on its partition before it is parked on iap.retry"),
        Setting("--parked-delay", env: "IAP_PARKED_DELAY", default: "60",
                help: "seconds (1 to 3600) before a parked message is first tried again; each failed try doubles the wait, up to an hour"),
        Setting("--dead-letter-value-bytes", env: "IAP_DEAD_LETTER_VALUE_BYTES", default: String(DeadLetter.maxValueBytes),
                help: "bytes of a dead-lettered message's value its dead letter keeps (signed payloads are claimable by whoever holds them; 0 keeps only size and SHA-256)"),
        Setting("--trap-records", env: "IAP_TRAP_RECORDS", default: FileManager.default.temporaryDirectory.appendingPathComponent("iap-trap-records").path,
                help: "directory that outlives the worker's process (an emptyDir in Kubernetes) where a worker that traps leaves the message it had in hand, so that the next one dead-letters it"),
        Setting("--test-fault-mark", env: "IAP_TEST_FAULT_MARK",
                help: "tests only, never in a deployment: a message whose iap-fault header holds this text crashes the worker when handled (to show that it is dead-lettered crashedWorker)"),
    ]

    /// What every executable resolves from its settings.
    public struct ProcessEnvironment: Sendable {
        public let command: String
        public let settings: Settings
        public let kafka: KafkaConfiguration
        public let schemas: JSONSchemaRegistry
        public let logger: Logger
        public let metrics: MetricsRegistry
        public let shutdownTimeout: Duration
        public let topicPrefix: String
        /// The environment variables the process runs with (an embedded worker's: those it was given), as HTTP clients read
        /// their proxy from them (`HTTPClient.Proxy.environment`).
        public let variables: [String: String]

        /// Resolves what every executable shares from `settings` (Kafka properties from `variables`' `KAFKA_*` too).
        init(command: String, settings: Settings, variables: [String: String]) throws {
            self.variables = variables
            let level: Logger.Level = switch settings.string("--log-level") {
            case "debug": .debug
            case "warning": .warning
            case "error": .error
            case "info": .info
            default: throw SettingsError("--log-level (IAP_LOG_LEVEL) must be debug, info, warning or error")
            }
            var kafka = KafkaConfiguration.fromEnvironment(variables)
            if let brokers = settings.string("--brokers") { kafka.bootstrapServers = brokers }
            try kafka.apply(settings: settings.kafkaSettings)
            guard kafka.bootstrapServers?.isEmpty == false else { throw SettingsError("--brokers (KAFKA_BOOTSTRAP_SERVERS) is required") }
            self.command = command
            self.settings = settings
            self.kafka = kafka
            schemas = try JSONSchemaRegistry.eventSchemas(directory: settings.string("--schemas-dir"))
            logger = Logger(stage: command, minimum: level)
            metrics = MetricsRegistry()
            shutdownTimeout = .milliseconds(Int64((try settings.seconds("--shutdown-timeout") ?? 30) * 1000))
            topicPrefix = settings.string("--topic-prefix") ?? ""
        }

        /// An event codec whose events name `/iap-pipeline/<component>` as their source.
        public func codec(component: String) -> EventCodec {
            EventCodec(schemas: schemas, source: "/iap-pipeline/\(component)", topicPrefix: topicPrefix)
        }
    }

    /// What a process runs: its services, when it is ready, and (for `iap-ingest`) its HTTP API.
    public struct Launch: Sendable {
        public var services: [any Service]
        public var readiness: @Sendable () async -> Readiness
        /// The HTTP port (when the executable serves one) and the routes besides /metrics, /healthz and /readyz.
        public var http: (port: UInt16, configuration: HTTPServer.Configuration, routes: OperationsServer.Routes?)?
        /// A port for the operations endpoints alone; the `http` port then serves them as public-facing (no
        /// `/metrics`, `/readyz` without reasons).
        public var operationsPort: UInt16?
        /// The address `operationsPort` is bound to; nil: the `http` port's.
        public var operationsHost: String?
        /// Runs after every service has stopped (e.g. flushing a producer the HTTP routes used).
        public var afterStop: (@Sendable () async -> Void)?

        public init(services: [any Service], readiness: @escaping @Sendable () async -> Readiness,
                    http: (port: UInt16, configuration: HTTPServer.Configuration, routes: OperationsServer.Routes?)? = nil,
                    afterStop: (@Sendable () async -> Void)? = nil) {
            self.services = services
            self.readiness = readiness
            self.http = http
            self.afterStop = afterStop
        }
    }

    /// Everything a worker needs, resolved from its settings.
    public struct Environment: Sendable {
        public let process: ProcessEnvironment
        public let store: SQLPurchaseStore
        public let groupPrefix: String

        public var settings: Settings { process.settings }
        public var kafka: KafkaConfiguration { process.kafka }
        public var schemas: JSONSchemaRegistry { process.schemas }
        public var logger: Logger { process.logger }
        public var metrics: MetricsRegistry { process.metrics }

        /// What the workers' producers run with: `kafka`, with their outputs compressed by lz4 unless `compression.type`
        /// is set (`KAFKA_COMPRESSION_TYPE`, `--kafka compression.type=…`; `none` turns it off). Compressed batches cost the
        /// broker less CPU per purchase and the workers no more (docs/benchmarks.md); consumers of the outputs need lz4
        /// (schemas/README.md, "Reading the pipeline's outputs").
        /// Not `iap-ingest`'s by default: the verifier would then decompress every fetch of submissions, and its memory is
        /// the closest to its limit.
        public var producerKafka: KafkaConfiguration {
            var kafka = self.kafka
            if kafka["compression.type"] == nil, kafka["compression.codec"] == nil { kafka["compression.type"] = "lz4" }
            return kafka
        }

        public func context(stage: String) -> StageContext {
            StageContext(codec: process.codec(component: stage), logger: logger)
        }

        public func runner(for stage: any MessageStage) throws -> StageRunner {
            let logger = self.logger
            var kafka = self.kafka
            if kafka["statistics.interval.ms"] == nil, let seconds = try settings.seconds("--statistics-interval") {
                kafka["statistics.interval.ms"] = String(Int(seconds * 1000))
            }
            let onEvent: @Sendable (KafkaConsumerEvent) -> Void = { event in
                switch event {
                case .assigned(let partitions): logger.info("partitions assigned", ["partitions": partitions.map(\.description).joined(separator: ",")])
                case .revoked(let partitions): logger.info("partitions revoked", ["partitions": partitions.map(\.description).joined(separator: ",")])
                case .abandoned(let partition): logger.warning("in-flight message abandoned at shutdown", ["partition": partition.description])
                case .error(let error): logger.warning("kafka", ["error": error.description])
                }
            }
            let leavesGroup = try WorkerApp.leavesGroup(settings)
            var consumerConfiguration = KafkaConsumer.Configuration(
                kafka: kafka, groupID: groupPrefix + stage.name, topics: stage.topics, shutdownTimeout: process.shutdownTimeout,
                maxInFlightPerPartition: try settings.int("--max-in-flight") ?? StageRunner.Configuration.defaultMaxBatch, onEvent: onEvent)
            consumerConfiguration.leavesGroupOnShutdown = leavesGroup
            let consumer = try KafkaConsumer(configuration: consumerConfiguration)
            let producer = try KafkaProducer(configuration: .init(kafka: producerKafka))
            var configuration = StageRunner.Configuration()
            guard let keep = try settings.int("--dead-letter-value-bytes"), keep >= 0 else {
                throw SettingsError("--dead-letter-value-bytes (IAP_DEAD_LETTER_VALUE_BYTES) must be 0 or more")
            }
            guard let maxBatch = try settings.int("--max-batch"), (1...1_000).contains(maxBatch) else {
                throw SettingsError("--max-batch (IAP_MAX_BATCH) must be 1 to 1000")
            }
            configuration.maxBatch = maxBatch
            guard let budget = try settings.seconds("--retry-budget"), budget <= 86_400 else {
                throw SettingsError("--retry-budget (IAP_RETRY_BUDGET) must be 0 to 86400 seconds")
            }
            configuration.retryBudget = .milliseconds(Int64(budget * 1000))
            guard let parkedDelay = try settings.seconds("--parked-delay"), (1...3600).contains(parkedDelay) else {
                throw SettingsError("--parked-delay (IAP_PARKED_DELAY) must be 1 to 3600 seconds")
            }
            configuration.parkedDelay = .milliseconds(Int64(parkedDelay * 1000))
            if let directory = settings.string("--trap-records") {
                guard !directory.isEmpty else { throw SettingsError("--trap-records (IAP_TRAP_RECORDS) must not be empty") }
                configuration.trapRecordDirectory = directory
            }
            if let mark = settings.string("--test-fault-mark") {
                guard !mark.isEmpty else { throw SettingsError("--test-fault-mark (IAP_TEST_FAULT_MARK) must not be empty") }
                configuration.faultMark = Data(mark.utf8)
            }
            let codec = process.codec(component: stage.name)
            // The re-driver: a consumer of the retry topic in a group of the stage's own (see StageRunner+Redriver).
            var retryConfiguration = KafkaConsumer.Configuration(kafka: kafka, groupID: groupPrefix + stage.name + "-retry", topics: [codec.retryTopic],
                                                                 shutdownTimeout: process.shutdownTimeout, onEvent: onEvent)
            retryConfiguration.leavesGroupOnShutdown = leavesGroup
            let retryConsumer = try KafkaConsumer(configuration: retryConfiguration)
            return StageRunner(stage: stage, consumer: consumer, producer: producer, deadLetters: EventDeadLetters(codec: codec, keepValueBytes: keep),
                               logger: logger, configuration: configuration, metrics: metrics,
                               parking: Parking(ledger: StoreParkingLedger(store: store), consumer: retryConsumer, topic: codec.retryTopic),
                               inFlight: StoreInFlightLedger(store: store))
        }
    }

    /// A worker's environment as its executable resolves it, from `arguments` and `variables` alone (its settings'
    /// environment names, e.g. `IAP_CATALOG`, and `KAFKA_*`), on `store`: for running a worker's stages inside another process — the pipeline
    /// tests, with the executables' assembly (`Workers.verifierStage`…, `Environment.runner`) and Kafka settings.
    public static func embedded(command: String, settings definitions: [Setting], arguments: [String] = [], variables: [String: String],
                                store: SQLPurchaseStore) throws -> Environment {
        let settings = try Settings(arguments: arguments, environment: variables, definitions: processSettings + workerSettings + definitions)
        let process = try ProcessEnvironment(command: command, settings: settings, variables: variables)
        return Environment(process: process, store: store, groupPrefix: settings.string("--group-prefix") ?? "iap-")
    }

    /// `--leave-group`: whether the stages' consumers leave their groups on a graceful shutdown.
    static func leavesGroup(_ settings: Settings) throws -> Bool { try settings.boolean("--leave-group") ?? true }

    /// The watchdog's bound from `--group-stall-seconds`, and whether a stalled member rejoins (`--rejoin-stalled-group`).
    static func groupWatch(_ settings: Settings) throws -> GroupWatchdog<ContinuousClock>.Configuration {
        var configuration = GroupWatchdog<ContinuousClock>.Configuration()
        // A stalled member rejoins; its old self stays in the group until the session timeout (10 s) expels it, and
        // joining takes a few seconds more. A shorter bound would judge every member of that rebalance stalled in turn.
        guard let seconds = try settings.seconds("--group-stall-seconds"), seconds >= 30 else {
            throw SettingsError("--group-stall-seconds (IAP_GROUP_STALL_SECONDS) must be at least 30 (three session timeouts)")
        }
        configuration.bound = .milliseconds(Int64(seconds * 1000))
        configuration.rejoinsWhenStalled = try settings.boolean("--rejoin-stalled-group") ?? true
        configuration.interval = min(configuration.interval, .milliseconds(Int64(seconds * 1000 / 2)))
        return configuration
    }

    /// Runs a worker: opens the store (migrating it), then `body`'s services with the operations
    /// endpoints when `--http-port` is set. Ready when every stage has partitions and the store answers.
    public static func main(command: String, summary: String, settings definitions: [Setting],
                            body: @escaping @Sendable (Environment) async throws -> [any Service]) async -> Int32 {
        await launch(command: command, summary: summary, settings: workerSettings + definitions) { process in
            let password = try process.settings.string("--store-password-file").map { path in
                do { return try SQLPurchaseStore.password(fromFile: path) } catch { throw SettingsError("--store-password-file (IAP_STORE_PASSWORD_FILE): \(error)") }
            }
            let url = try process.settings.required("--store")
            guard let connections = try process.settings.int("--store-connections"), (1...64).contains(connections) else {
                throw SettingsError("--store-connections (IAP_STORE_CONNECTIONS) must be 1 to 64")
            }
            let storeGauges = try process.settings.boolean("--store-gauges") ?? true
            let (store, applied) = try await openStore(url: url, password: password, connections: connections, logger: process.logger)
            process.logger.info("store opened", ["store": store.location, "migrationsApplied": applied.map(String.init).joined(separator: ",")])
            let environment = Environment(process: process, store: store, groupPrefix: process.settings.string("--group-prefix") ?? "iap-")
            let services = try await body(environment)
            let runners = services.compactMap { $0 as? StageRunner }
            // The scrape's counts on a connection of their own (opened at the first scrape): a count of every purchase must
            // not hold the stages' connection, nor wait for their batches.
            if storeGauges {
                StoreMetrics.register(store: try SQLPurchaseStore(url: url, password: password, connections: 1), metrics: process.metrics,
                                      stages: runners.map(\.stageName), totalsInterval: try process.settings.seconds("--store-totals-interval") ?? 300)
            }
            ConsumerMetrics.register(runners: runners, metrics: process.metrics)
            // A rebalance that does not complete is reported, not silent (GroupWatchdog); an idle extra replica is ready.
            let watchdog = GroupWatchdog(consumers: runners.flatMap(\.consumers),
                                         configuration: try groupWatch(process.settings), clock: ContinuousClock(), logger: process.logger,
                                         metrics: process.metrics, describe: GroupWatchdog<ContinuousClock>.describing(with: try KafkaAdmin(kafka: process.kafka)))
            let readiness: @Sendable () async -> Readiness = {
                if let notReady = watchdog.readiness { return notReady }
                do { try await store.ping() } catch { return .notReady("store unreachable: \(error)") }
                return .ready
            }
            var launch = Launch(services: runners.isEmpty ? services : services + [watchdog], readiness: readiness)
            if let port = try process.settings.int("--http-port") {
                guard (0...65535).contains(port) else { throw SettingsError("--http-port (IAP_HTTP_PORT) must be 0–65535, got \(port)") }
                launch.http = (UInt16(port), OperationsServer.operationsConfiguration(host: process.settings.string("--http-host") ?? "0.0.0.0"), nil)
            }
            return launch
        }
    }

    /// Parses settings, checks librdkafka, runs `body`'s launch until SIGTERM/SIGINT. Exit codes: 0 after a
    /// graceful shutdown, 1 on a runtime failure, 2 on a configuration error (the message names the setting).
    public static func launch(command: String, summary: String, settings definitions: [Setting],
                              body: @escaping @Sendable (ProcessEnvironment) async throws -> Launch) async -> Int32 {
        MallocArenas.limit(environment: ProcessInfo.processInfo.environment)
        let all = processSettings + definitions
        do {
            try KafkaLibrary.requireSupportedVersion()
            let settings = try Settings(arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment,
                                        definitions: all)
            if settings.helpRequested {
                print(Settings.help(command: command, summary: summary, definitions: all))
                return 0
            }
            let process = try ProcessEnvironment(command: command, settings: settings, variables: ProcessInfo.processInfo.environment)
            let logger = process.logger
            var launch = try await body(process)
            if let http = launch.http, !launch.services.isEmpty {
                var configuration = http.configuration
                configuration.port = http.port
                let server: OperationsServer
                do {
                    server = try OperationsServer(configuration: configuration, metrics: process.metrics, readiness: launch.readiness, routes: http.routes,
                                                  publicFacing: launch.operationsPort != nil)
                } catch { throw SettingsError("--http-port (IAP_HTTP_PORT): \(error)") }
                launch.services.append(server)
                logger.info("http endpoints", ["port": Int(server.port), "host": configuration.host])
                var bound = ["http": Int(server.port)]
                if let port = launch.operationsPort {
                    let operations = OperationsServer.operationsConfiguration(host: launch.operationsHost ?? configuration.host, port: port)
                    let server: OperationsServer
                    do {
                        server = try OperationsServer(configuration: operations, metrics: process.metrics, readiness: launch.readiness)
                    } catch { throw SettingsError("--ops-port, --ops-host (IAP_OPS_PORT, IAP_OPS_HOST): \(error)") }
                    launch.services.append(server)
                    logger.info("operations endpoints", ["port": Int(server.port), "host": operations.host])
                    bound["operations"] = Int(server.port)
                }
                if let path = settings.string("--http-port-file") {
                    do { try PortFile.write(bound, to: path) } catch { throw SettingsError("--http-port-file (IAP_HTTP_PORT_FILE): cannot write \(path): \(error)") }
                }
            }
            // Started by the harness or a test: ends with it, also when it is killed.
            if !launch.services.isEmpty,
               let watch = ParentWatch.requested(by: ProcessInfo.processInfo.environment, clock: ContinuousClock(), logger: logger) {
                launch.services.append(watch)
            }
            logger.info("started", ["librdkafka": KafkaLibrary.version])
            // Nothing to run (e.g. `iap-sweeper --once`): done.
            if !launch.services.isEmpty { try await ServiceGroup(services: launch.services).run() }
            await launch.afterStop?()
            logger.info("stopped")
            return 0
        } catch {
            FileHandle.standardError.write(Data("\(command): \(error)\n".utf8))
            // Configuration problems (each message names the setting) exit 2; failures at run time exit 1.
            return error is SettingsError || error is VerifierConfigurationError || error is CatalogError ? 2 : 1
        }
    }

    /// Opens and migrates the store, retrying what may pass (the database starting up or failing over, or
    /// SQLite locked by another worker migrating the same file at the same moment) for up to a minute.
    static func openStore(url: String, password: String?, connections: Int, logger: Logger) async throws -> (SQLPurchaseStore, [Int]) {
        let deadline = ContinuousClock.now + .seconds(60)
        var delay = Duration.milliseconds(100)
        while true {
            do {
                let store = try SQLPurchaseStore(url: url, password: password, connections: connections)
                return (store, try await store.migrate())
            } catch let error as DatabaseError where error.isRetriable && ContinuousClock.now + delay < deadline {
                logger.warning("store not available yet, retrying", ["error": error.description, "delayMs": Int(delay.components.seconds * 1000
                                                                                                                 + delay.components.attoseconds / 1_000_000_000_000_000)])
                try await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(5))
            }
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

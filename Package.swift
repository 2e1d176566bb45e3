// swift-tools-version:6.0
import Foundation
import PackageDescription

// librdkafka >= 2.2 is built into .deps/ by `make bootstrap` when the system's is older
// (Debian 12 ships 2.0.2). The Makefile points pkg-config at .deps/lib/pkgconfig; the rpath
// below makes every binary load that build at run time, never the system's 2.0.2.
// DT_RPATH (--disable-new-dtags) is searched before LD_LIBRARY_PATH and the system dirs.
let depsLib = Context.packageDirectory + "/.deps/lib"
let rdkafkaLinkerSettings: [LinkerSetting] =
    FileManager.default.fileExists(atPath: depsLib + "/pkgconfig/rdkafka.pc")
    ? [.unsafeFlags(["-Xlinker", "-rpath", "-Xlinker", depsLib, "-Xlinker", "--disable-new-dtags"])]
    : []

let package = Package(
    name: "iap-pipeline",
    products: [
        .library(name: "Kafka", targets: ["Kafka"]),
        .library(name: "WorkerRuntime", targets: ["WorkerRuntime"]),
        .library(name: "Crypto", targets: ["Crypto"]),
        .library(name: "StoreVerification", targets: ["StoreVerification"]),
        .library(name: "JSONSchema", targets: ["JSONSchema"]),
        .library(name: "PurchaseStore", targets: ["PurchaseStore"]),
        .library(name: "PurchaseDomain", targets: ["PurchaseDomain"]),
        .library(name: "PurchaseEvents", targets: ["PurchaseEvents"]),
        .library(name: "Metrics", targets: ["Metrics"]),
        .executable(name: "iapctl", targets: ["iapctl"]),
        .executable(name: "iap-harness", targets: ["iap-harness"]),
        .executable(name: "iap-verifier", targets: ["iap-verifier"]),
        .executable(name: "iap-granter", targets: ["iap-granter"]),
        .executable(name: "iap-finisher", targets: ["iap-finisher"]),
        .executable(name: "iap-sweeper", targets: ["iap-sweeper"]),
        .executable(name: "iap-ingest", targets: ["iap-ingest"]),
        .executable(name: "iap-webhooks", targets: ["iap-webhooks"]),
    ],
    targets: [
        // C libraries from Debian, through pkg-config.
        .systemLibrary(name: "CRdKafka", pkgConfig: "rdkafka", providers: [.apt(["librdkafka-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),

        // Kafka: the only module that touches librdkafka (and only in its RDKafka/ folder).
        .target(name: "Kafka", dependencies: ["CRdKafka"], linkerSettings: rdkafkaLinkerSettings),
        // Text whose identity is its UTF-8 bytes: every identifier from outside (users, transactions, Kafka keys).
        .target(name: "Identifiers"),
        // The domain core: stores, keys, identifiers, product types, the purchase lifecycle. No I/O.
        .target(name: "PurchaseDomain", dependencies: ["Identifiers"]),
        // OpenSSL: certificates, chains, ECDSA, PKCS#7; the only module that touches libcrypto.
        .target(name: "Crypto", dependencies: ["COpenSSL"]),
        // JSON values and a strict, depth-bounded parser; JSON Schema validation.
        .target(name: "JSON"),
        .target(name: "JSONSchema", dependencies: ["JSON"]),
        // Store verification: App Store signed data and receipts, AppCoins purchases.
        .target(name: "StoreVerification", dependencies: ["PurchaseDomain", "Crypto", "JSON", "HTTPClient"]),
        // A test PKI and App Store-shaped signed data, built at run time (tests, demo, benchmarks).
        .target(name: "StoreFixtures", dependencies: ["Crypto", "HTTPServer", "JSON", "PurchaseDomain", "StoreVerification"]),
        // A small HTTP/1.1 server: health, metrics, webhooks, and stand-in store APIs in tests.
        .target(name: "HTTPServer"),
        // The timestamped HMAC on requests between the pipeline and backends: the ingest's read side checks it, webhooks out carry it.
        .target(name: "RequestSigning", dependencies: ["Crypto", "HTTPServer"]),
        // A small HTTP/1.1 client over libcurl for the store APIs: the only module that touches libcurl.
        .target(name: "HTTPClient", dependencies: ["CCurl"]),
        // Prometheus metrics of one process.
        .target(name: "Metrics"),
        // SQLite and PostgreSQL connections: the only module that touches sqlite3 and libpq.
        .target(name: "Database", dependencies: ["CSQLite", "CLibPQ"]),
        // The purchase store: purchases, ledger, balances, entitlements on SQLite or PostgreSQL.
        .target(name: "PurchaseStore", dependencies: ["PurchaseDomain", "Database", "Crypto"]),
        // The pipeline's events: typed, CloudEvents headers, validated against schemas/.
        .target(name: "PurchaseEvents", dependencies: ["PurchaseDomain", "Kafka", "JSON", "JSONSchema", "Crypto"]),
        // Delivery of a stage's messages (consumption, retries, batches, output order, parking, dead letters, metrics) and the
        // lifecycle of long-running services (signals, graceful shutdown). Knows nothing of purchases or their events.
        // The signal handler that records the message a trapping worker had in hand (C: it must be async-signal-safe).
        .target(name: "CTrapRecord"),
        .target(name: "WorkerRuntime", dependencies: ["CTrapRecord", "Identifiers", "Crypto", "JSON", "Kafka", "HTTPServer", "Metrics"]),
        // The four stages: verify, grant, finish, sweep.
        .target(name: "Stages", dependencies: ["PurchaseDomain", "WorkerRuntime", "Kafka", "PurchaseEvents", "StoreVerification", "JSON", "HTTPClient", "RequestSigning"]),

        // iap-ingest's API: store webhooks and client submissions to events.
        .target(name: "Ingest", dependencies: ["Crypto", "Database", "HTTPClient", "HTTPServer", "Identifiers", "JSON", "Kafka", "Metrics", "PurchaseDomain", "PurchaseEvents", "PurchaseStore",
                                               "RequestSigning", "StoreVerification", "WorkerRuntime"]),

        // glibc's mallopt, which the Glibc module leaves out: the workers keep to two malloc arenas (see MallocArenas).
        .systemLibrary(name: "CMalloc"),
        // Start-up shared by the worker executables: settings, wiring, signals.
        .target(name: "WorkerApp", dependencies: ["PurchaseDomain", "Ingest", "RequestSigning", "HTTPClient", "Database", "Stages", "WorkerRuntime", "Metrics", "HTTPServer", "Kafka", "PurchaseEvents", "PurchaseStore", "StoreVerification",
                                                  "JSON", "JSONSchema", "Crypto", "CMalloc"]),
        .executableTarget(name: "iap-verifier", dependencies: ["WorkerApp"], linkerSettings: rdkafkaLinkerSettings),
        .executableTarget(name: "iap-granter", dependencies: ["WorkerApp"], linkerSettings: rdkafkaLinkerSettings),
        .executableTarget(name: "iap-finisher", dependencies: ["WorkerApp"], linkerSettings: rdkafkaLinkerSettings),
        .executableTarget(name: "iap-sweeper", dependencies: ["WorkerApp"], linkerSettings: rdkafkaLinkerSettings),
        .executableTarget(name: "iap-ingest", dependencies: ["WorkerApp"], linkerSettings: rdkafkaLinkerSettings),
        .executableTarget(name: "iap-webhooks", dependencies: ["WorkerApp"], linkerSettings: rdkafkaLinkerSettings),
        // Options and usage errors of the command-line tools.
        .target(name: "CommandLineOptions", dependencies: ["Kafka", "JSON"]),
        // The operator's tool. Links nothing that signs test data (a test walks each product's dependencies).
        .executableTarget(
            name: "iapctl",
            dependencies: ["CommandLineOptions", "PurchaseDomain", "Ingest", "RequestSigning", "Kafka", "WorkerRuntime", "Crypto", "JSON", "JSONSchema", "PurchaseEvents",
                           "PurchaseStore", "StoreVerification", "Database"],
            linkerSettings: rdkafkaLinkerSettings
        ),
        // posix_spawn's GNU file actions, and child processes started with them (the harness's workers, the tests' executables).
        .systemLibrary(name: "CSpawn"),
        .target(name: "ChildProcesses", dependencies: ["CSpawn"]),
        // The pieces of every run on stand-ins: worker processes, input, the stand-in App Store, the watcher, the books.
        .target(name: "PipelineHarness", dependencies: ["ChildProcesses", "WorkerRuntime", "Crypto", "HTTPClient", "JSON", "JSONSchema", "Kafka", "PurchaseDomain", "PurchaseEvents", "PurchaseStore",
                                                        "StoreFixtures", "StoreVerification"]),
        // Demo, benchmarks and chaos on stand-in stores, with test data signed at run time: for developers and CI only.
        .executableTarget(
            name: "iap-harness",
            dependencies: ["ChildProcesses", "CommandLineOptions", "PipelineHarness", "PurchaseDomain", "Stages", "Ingest", "HTTPClient", "HTTPServer", "Kafka", "WorkerRuntime", "Crypto", "JSON", "JSONSchema", "PurchaseEvents",
                           "PurchaseStore", "StoreVerification", "StoreFixtures"],
            linkerSettings: rdkafkaLinkerSettings
        ),

        .target(name: "TestSupport", dependencies: ["Kafka", "Database", "ChildProcesses", "HTTPClient", "WorkerRuntime"], path: "Tests/TestSupport", exclude: ["tansu_s3.py", "broker_proxy.py"]),
        // Test data that needs no service and links nothing: confusable identifiers, a seeded random generator, byte mutations.
        .target(name: "TestData", path: "Tests/TestData"),
        // A purchase repository in memory that keeps the lifecycle as the SQL store does: for unit tests of the stages.
        .target(name: "InMemoryPurchaseStore", dependencies: ["PurchaseDomain"], path: "Tests/InMemoryPurchaseStore"),
        // What tests of the stages share, with a broker or without: schemas, codec, catalog, messages as a consumer hands them over.
        .target(name: "StageTestSupport", dependencies: ["JSONSchema", "Kafka", "PurchaseDomain", "PurchaseEvents", "WorkerRuntime"], path: "Tests/StageTestSupport"),
        .testTarget(name: "KafkaTests", dependencies: ["Kafka", "TestSupport"], linkerSettings: rdkafkaLinkerSettings),
        .testTarget(name: "HTTPClientTests", dependencies: ["HTTPClient", "HTTPServer", "TestSupport"], linkerSettings: rdkafkaLinkerSettings),
        .testTarget(name: "StoreVerificationTests", dependencies: ["PurchaseDomain", "StoreVerification", "StoreFixtures", "Crypto", "HTTPClient", "JSON", "HTTPServer", "TestData",
                                                               "TestSupport"],
                    linkerSettings: rdkafkaLinkerSettings),
        .testTarget(name: "IAPCtlTests", dependencies: ["ChildProcesses", "RequestSigning", "iap-webhooks", "PurchaseDomain", "PurchaseStore", "iapctl", "iap-harness", "Kafka", "PurchaseEvents", "JSONSchema", "iap-verifier", "iap-granter", "iap-finisher", "iap-sweeper", "iap-ingest", "Ingest", "JSON",
                                                        "StoreVerification", "StoreFixtures", "TestSupport", "HTTPServer"], exclude: ["foreign_producer.py", "googleplay_producer.py", "deploy_check.py"],
                    linkerSettings: rdkafkaLinkerSettings),
        .testTarget(name: "JSONSchemaTests", dependencies: ["JSONSchema", "JSON", "TestSupport"],
                    exclude: ["schema_check.py"], linkerSettings: rdkafkaLinkerSettings),
        .testTarget(name: "DatabaseTests", dependencies: ["Database", "TestSupport"], linkerSettings: rdkafkaLinkerSettings),
        .testTarget(name: "PurchaseStoreTests", dependencies: ["PurchaseDomain", "PurchaseStore", "InMemoryPurchaseStore", "Database", "TestData", "TestSupport"], linkerSettings: rdkafkaLinkerSettings),
        .testTarget(name: "PurchaseEventsTests", dependencies: ["PurchaseDomain", "PurchaseEvents", "JSON", "JSONSchema", "Kafka", "TestSupport"],
                    linkerSettings: rdkafkaLinkerSettings),
        .testTarget(name: "PipelineTests", dependencies: ["PipelineHarness", "StageTestSupport", "WorkerApp", "PurchaseDomain", "Stages", "WorkerRuntime", "Kafka", "PurchaseEvents", "PurchaseStore", "Database", "StoreFixtures",
                                                         "StoreVerification", "JSON", "JSONSchema", "Crypto", "HTTPServer", "TestData", "TestSupport"],
                    linkerSettings: rdkafkaLinkerSettings),
        // The stages' decisions on the in-memory repository: no broker, no database.
        .testTarget(name: "StagesTests", dependencies: ["Stages", "PurchaseDomain", "PurchaseEvents", "InMemoryPurchaseStore", "StageTestSupport", "Kafka",
                                                       "WorkerRuntime", "JSON", "StoreFixtures", "StoreVerification", "Crypto", "HTTPClient", "HTTPServer", "RequestSigning"],
                    linkerSettings: rdkafkaLinkerSettings),
        .testTarget(name: "PurchaseDomainTests", dependencies: ["PurchaseDomain", "TestData"]),
        .testTarget(name: "WorkerRuntimeTests", dependencies: ["WorkerRuntime", "Metrics", "TestSupport"], linkerSettings: rdkafkaLinkerSettings),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "TestSupport"], linkerSettings: rdkafkaLinkerSettings),
        .testTarget(name: "MetricsTests", dependencies: ["Metrics"]),
        .testTarget(name: "JSONTests", dependencies: ["JSON", "TestData"]),
        .testTarget(name: "CryptoTests", dependencies: ["Crypto"]),
        .testTarget(name: "CommandLineOptionsTests", dependencies: ["CommandLineOptions"], linkerSettings: rdkafkaLinkerSettings),
        // Runs iap-ingest, iapctl and iap-harness as processes: they are built first.
        .testTarget(name: "IngestTests", dependencies: ["Ingest", "RequestSigning", "HTTPServer", "JSON", "StoreFixtures", "TestSupport", "iap-ingest", "iapctl", "iap-harness",
                                                       "Crypto", "Kafka", "Metrics", "PurchaseDomain", "PurchaseEvents", "PurchaseStore", "StageTestSupport", "WorkerRuntime",
                                                       "StoreVerification"],
                    linkerSettings: rdkafkaLinkerSettings),
        // Hostile inputs (values at and beyond every bound, broken JSON, events out of order) against every stage on every
        // repository and every HTTP route of the ingest; seeded, replayable (`make fuzz`).
        .testTarget(name: "HostileInputTests", dependencies: ["Stages", "Identifiers", "Ingest", "HTTPServer", "HTTPClient", "JSON", "Kafka", "Metrics", "PurchaseDomain", "PurchaseEvents",
                                                              "PurchaseStore", "InMemoryPurchaseStore", "StageTestSupport", "StoreFixtures", "StoreVerification",
                                                              "TestData", "TestSupport", "WorkerRuntime"],
                    linkerSettings: rdkafkaLinkerSettings),
        // The manifest itself (the layers, what each product links, who reaches each C library) and the unit-test list.
        .testTarget(name: "PackageTests", dependencies: ["JSON", "TestSupport"], linkerSettings: rdkafkaLinkerSettings),
    ]
)

// Release builds optimize across module boundaries: generic code of one module (the JSON decoder, the store's
// executor, the event codec) specialized where another module calls it, not run through metadata and witness tables.
for target in package.targets where target.type != .system {
    target.swiftSettings = (target.swiftSettings ?? []) + [.unsafeFlags(["-cross-module-optimization"], .when(configuration: .release))]
}

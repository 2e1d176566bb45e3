import ChildProcesses
import Database
import Foundation
import Synchronization
import Kafka
import Testing

/// Services the tests use. `make test` starts them and sets IAP_REQUIRE_SERVICES=1, so a missing
/// one fails the run; under a bare `swift test` their tests are skipped with the reason shown.
public enum TestServices {
    public static let environment = ProcessInfo.processInfo.environment
    public static let required = environment["IAP_REQUIRE_SERVICES"] == "1"
    /// An empty variable counts as unset (a shell that lost the value must not look like a broker at "").
    public static let brokers = environment["IAP_TEST_BROKERS"].flatMap { $0.isEmpty ? nil : $0 }
    /// A PostgreSQL server (make test starts a throwaway cluster).
    public static let postgresURL = environment["IAP_TEST_POSTGRES_URL"].flatMap { $0.isEmpty ? nil : $0 }

    public static let postgres = ConditionTrait.enabled(
        if: postgresURL != nil || required, "no PostgreSQL: set IAP_TEST_POSTGRES_URL (make test starts one)")

    public static func requirePostgres() throws -> String {
        try #require(postgresURL, "IAP_TEST_POSTGRES_URL is not set although IAP_REQUIRE_SERVICES=1")
    }

    /// A Python with `jsonschema` (make test uses the one in .deps/venv).
    public static let python = environment["IAP_TEST_PYTHON"].flatMap { $0.isEmpty ? nil : $0 }

    public static let pythonTools = ConditionTrait.enabled(
        if: python != nil || required, "no Python with jsonschema: set IAP_TEST_PYTHON (make test provides one)")

    public static func requirePython() throws -> String {
        try #require(python, "IAP_TEST_PYTHON is not set although IAP_REQUIRE_SERVICES=1")
    }

    /// The directory of Prometheus's `prometheus` and `promtool` (make test uses Debian's, unpacked into .deps by the bootstrap).
    public static let prometheusBin = environment["IAP_TEST_PROMETHEUS_BIN"].flatMap { $0.isEmpty ? nil : $0 }

    public static let prometheus = ConditionTrait.enabled(
        if: prometheusBin != nil || required, "no Prometheus: set IAP_TEST_PROMETHEUS_BIN to the directory of prometheus and promtool (make test provides one)")

    /// The path of Prometheus's `tool` (`prometheus` or `promtool`).
    public static func requirePrometheus(_ tool: String) throws -> String {
        let directory = try #require(prometheusBin, "IAP_TEST_PROMETHEUS_BIN is not set although IAP_REQUIRE_SERVICES=1")
        return URL(fileURLWithPath: directory).appendingPathComponent(tool).path
    }

    /// `make test-unit` runs the unit tests alone (Tests/unit-tests.txt) with IAP_UNIT_TESTS_ONLY=1 and IAP_REQUIRE_SERVICES=1
    /// but no service, so that a test there which starts a process, or needs a service, fails instead of passing as a unit test.
    public static let unitTestsOnly = environment["IAP_UNIT_TESTS_ONLY"] == "1"

    /// Throws under `unitTestsOnly`; every child process a test starts through TestSupport asks here first.
    public static func allowChildProcess(_ executable: String) throws {
        guard !unitTestsOnly else { throw ChildProcessInUnitTests(executable: executable) }
    }

    public struct ChildProcessInUnitTests: Error, CustomStringConvertible {
        public let executable: String
        public var description: String { "a unit test starts no process, and this one starts \(executable): list it out of Tests/unit-tests.txt" }
    }

    /// The package's root directory (for schemas/ and the built binaries).
    public static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    public static let broker = ConditionTrait.enabled(
        if: brokers != nil || required,
        "no Kafka broker: set IAP_TEST_BROKERS=host:port (make test starts one)")

    /// The broker's address; fails the test when `make test` should have provided one.
    public static func requireBrokers() throws -> String {
        try #require(brokers, "IAP_TEST_BROKERS is not set although IAP_REQUIRE_SERVICES=1")
    }
}

/// A name no other test (or earlier run against the same broker) uses.
public func uniqueName(_ prefix: String) -> String {
    "\(prefix)-\(UUID().uuidString.prefix(8).lowercased())"
}

/// Consumer settings for tests: the group membership is the workers' own (`KafkaConsumer`'s defaults, nothing
/// tuned here); topics created during a test are noticed within a second; librdkafka logs errors only.
public func testConsumerKafka(_ servers: String) -> KafkaConfiguration {
    KafkaConfiguration([
        "bootstrap.servers": servers,
        "topic.metadata.refresh.interval.ms": "1000",
        "log_level": "3",
    ])
}

/// Waits until `condition` holds, checking every few milliseconds; fails after `timeout`. The bound is a safety net, not a
/// speed target: the whole suite runs in parallel on two cores with brokers, databases and worker processes, where a
/// consumer group's join that takes a second alone can take a minute and more.
public func waitUntil(
    _ what: String, timeout: Duration = .seconds(150),
    sourceLocation: SourceLocation = #_sourceLocation, _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try await !condition() {
        if ContinuousClock.now >= deadline {
            Issue.record("timed out after \(timeout) waiting until \(what)", sourceLocation: sourceLocation)
            throw CancellationError()
        }
        try await Task.sleep(for: .milliseconds(20))
    }
}

/// Collects what handlers saw, from any task.
public actor Recorder {
    public init() {}
    public private(set) var messages: [KafkaMessage] = []

    public func record(_ message: KafkaMessage) { messages.append(message) }
    public var count: Int { messages.count }
    public var values: [String] { messages.map { String(decoding: $0.value ?? Data(), as: UTF8.self) } }
}

/// A consumer running in a task of its own, for tests that start and stop group members.
public struct RunningConsumer {
    public let consumer: KafkaConsumer
    public let task: Task<Void, any Error>

    public init(_ consumer: KafkaConsumer, handler: @escaping KafkaConsumer.Handler) {
        self.consumer = consumer
        task = Task { try await consumer.run(handler) }
    }

    /// Graceful shutdown; rethrows what `run` threw.
    public func stop() async throws {
        consumer.triggerGracefulShutdown()
        try await task.value
    }
}

/// The offsets `group` has committed, read by a fresh member that does not join the group.
public func committedOffsets(_ servers: String, group: String, _ partitions: [TopicPartition]) throws -> [TopicPartition: Int64] {
    try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: []))
        .committedOffsets(partitions)
}

/// Suspends callers until opened.
public actor Gate {
    public init() {}
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    public func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiters.append($0) }
    }

    public func open() {
        isOpen = true
        waiters.forEach { $0.resume() }
        waiters.removeAll()
    }
}

/// Counts from any task.
public actor Counter {
    public init() {}
    public private(set) var value = 0
    public func increment() { value += 1 }
}

/// A value shared between a test and the callbacks it sets up.
public final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    public init(_ value: Value) { mutex = Mutex(value) }
    public var value: Value {
        get { mutex.withLock { $0 } }
        set { mutex.withLock { $0 = newValue } }
    }
    public func withLock<T>(_ body: (inout Value) -> T) -> T { mutex.withLock { body(&$0) } }
}

/// Runs Tests/JSONSchemaTests/schema_check.py (Python's jsonschema) over schemas/ and, if given, a directory
/// of instances named `TYPE.anything.json`; returns its exit status and output.
public func runPythonSchemaCheck(python: String, instances: URL? = nil) throws -> (status: Int32, output: String) {
    try runCommand(python, [TestServices.packageRoot.appendingPathComponent("Tests/JSONSchemaTests/schema_check.py").path,
                            TestServices.packageRoot.appendingPathComponent("schemas").path] + (instances.map { [$0.path] } ?? []))
}

/// Runs a program to its end; standard output and error together.
public func runCommand(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                       directory: URL? = nil) throws -> (status: Int32, output: String) {
    try TestServices.allowChildProcess(executable)
    let pipe = Pipe()
    let child = try ChildProcess(executable, arguments, environment: environment, directory: directory?.path,
                                 standardOutput: pipe.fileHandleForWriting.fileDescriptor, standardError: pipe.fileHandleForWriting.fileDescriptor)
    try pipe.fileHandleForWriting.close() // the child's end: the read below ends when the child closes its copy
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    child.waitUntilExit()
    return (child.terminationStatus, output)
}

/// The purchase store engines tests run against: SQLite always, PostgreSQL where a server is given.
public enum StoreEngine: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite, postgres
    public var testDescription: String { rawValue }

    /// A fresh, migrated store URL (a new file, or a new database on the test server).
    public func freshURL() async throws -> String {
        switch self {
        case .sqlite:
            return "sqlite:" + FileManager.default.temporaryDirectory.appendingPathComponent("iap-store-\(UUID().uuidString).sqlite").path
        case .postgres:
            let server = try TestServices.requirePostgres()
            let name = "store_\(UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: ""))"
            try PostgresConnection(url: server).query("CREATE DATABASE \(name)")
            guard let slash = server.lastIndex(of: "/") else { throw DatabaseError(code: "url", message: server, isRetriable: false) }
            return server[..<slash] + "/" + name
        }
    }

    public var enabled: Bool { self == .sqlite || TestServices.postgresURL != nil || TestServices.required }
}


extension StoreEngine {
    /// The engines available to this test run.
    public static var available: [StoreEngine] { allCases.filter(\.enabled) }
}

/// The fenced code blocks of a Markdown document that follow a `<!-- example: TYPE -->` or `<!-- test: NAME -->`
/// line, so that tests check (or run) exactly what the documentation shows.
public func documentedBlocks(in file: URL) throws -> [(marker: String, text: String)] {
    let lines = try String(contentsOf: file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
    var blocks: [(marker: String, text: String)] = []
    for (index, line) in lines.enumerated() {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        guard trimmed.hasPrefix("<!-- "), trimmed.hasSuffix(" -->"), index + 1 < lines.count, lines[index + 1].hasPrefix("```") else { continue }
        let body = lines[(index + 2)...].prefix { !$0.hasPrefix("```") }
        blocks.append((String(trimmed.dropFirst(5).dropLast(4)), body.joined(separator: "\n")))
    }
    return blocks
}

/// Runs blocking work (a child process, a blocking socket) on a thread of its own and awaits it, so that it never
/// holds one of the few threads of Swift's cooperative pool: on 2 cores, two blocked tests would stall every other.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.start()
    }
}

extension PostgresConnection {
    /// Advisory locks waited for in this connection's database: other tests' databases on the same server have their own,
    /// which `pg_locks` lists too.
    public func waitingAdvisoryLocks() throws -> Int64? {
        try query("""
            SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """).first?[0].int64
    }
}

/// A directory of a test's own files, under the temporary directory; `remove()` deletes it.
public struct TestDirectory: Sendable {
    public let url: URL

    /// Creates `<temporary directory>/<prefix>-<UUID>`.
    public init(_ prefix: String) throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// The path of `name` in the directory.
    public func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    /// Writes `text` to `name` in the directory; returns its path.
    public func file(_ name: String, _ text: String) throws -> String {
        try Data(text.utf8).write(to: url.appendingPathComponent(name))
        return path(name)
    }

    public func remove() { try? FileManager.default.removeItem(at: url) }
}

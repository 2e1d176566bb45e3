import Foundation
import Kafka
import Testing

/// A Tansu broker of the test's own whose topics can grow while clients use them.
///
/// Tansu 0.6 answers CreatePartitions "unsupported" and librdkafka's mock cluster has no handler for it, so this
/// broker keeps its metadata in S3 storage (moto's server on a port of the kernel's choice, started by `tansu_s3.py`), where `grow` raises a topic's
/// partition count as CreatePartitions would: clients see the new count in metadata, produce to the new partitions
/// and fetch from them. Slower than the in-memory broker of `make test` (every write goes through S3).
public final class GrowableBroker: Sendable {
    public let bootstrapServers: String
    private let storage: BackgroundProcess
    private let broker: BackgroundProcess
    private let storageEndpoint: String
    private let python: String
    private static let bucket = "tansu"
    private static let cluster = "tansu_cluster"

    private init(bootstrapServers: String, storage: BackgroundProcess, broker: BackgroundProcess, storageEndpoint: String, python: String) {
        self.bootstrapServers = bootstrapServers
        self.storage = storage
        self.broker = broker
        self.storageEndpoint = storageEndpoint
        self.python = python
    }

    static var script: String { TestServices.packageRoot.appendingPathComponent("Tests/TestSupport/tansu_s3.py").path }

    /// Starts the storage and the broker, and waits until the broker answers.
    public static func start() async throws -> GrowableBroker {
        let python = try TestServices.requirePython()
        let tansu = TestServices.packageRoot.appendingPathComponent(".deps/bin/tansu")
        try #require(FileManager.default.isExecutableFile(atPath: tansu.path), "tansu is not installed: make bootstrap")
        let storage = try BackgroundProcess(python, [script, "serve", bucket])
        let ready = "tansu_s3 ready "
        try await waitUntil("the S3 storage is ready (moto: make bootstrap installs it)") {
            storage.output.split(separator: "\n").contains { $0.hasPrefix(ready) } || !storage.isRunning
        }
        let storagePort = try #require(
            storage.output.split(separator: "\n").first { $0.hasPrefix(ready) }.flatMap { Int($0.dropFirst(ready.count)) },
            "the S3 storage did not start: \(storage.output.suffix(2_000))")
        let endpoint = "http://127.0.0.1:\(storagePort)"
        let (broker, servers) = try await onFreshPorts(1) { ports in
            let broker = try BackgroundProcess(
                tansu.path,
                ["broker", "--listener-url", "tcp://127.0.0.1:\(ports[0])", "--advertised-listener-url", "tcp://127.0.0.1:\(ports[0])",
                 "--storage-engine", "s3://\(bucket)/", "--cluster-id", cluster],
                environment: ["AWS_ENDPOINT": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                              "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"])
            let servers = "127.0.0.1:\(ports[0])"
            let admin = try KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers, "log_level": "0"]))
            try await waitUntil("the broker on S3 storage answers") {
                guard broker.isRunning else { return true }
                do {
                    _ = try await offPool { try admin.metadata(timeout: .seconds(2)) }
                    return true
                } catch {
                    return false // not listening yet
                }
            }
            guard broker.isRunning else { throw ExitedBeforeListening(broker.output) }
            return (broker, servers)
        }
        return GrowableBroker(bootstrapServers: servers, storage: storage, broker: broker, storageEndpoint: endpoint, python: python)
    }

    /// Raises `topics` to `partitions` partitions each, and waits until the broker's metadata says so.
    public func grow(_ topics: [String], to partitions: Int) async throws {
        let (python, endpoint) = (self.python, storageEndpoint)
        let result = try await offPool {
            try runCommand(python, [Self.script, "grow", endpoint, Self.bucket, Self.cluster, "\(partitions)"] + topics)
        }
        try #require(result.status == 0, "growing the topics failed: \(result.output)")
        let admin = try KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": bootstrapServers]))
        try await waitUntil("the broker reports \(partitions) partitions") {
            do {
                let counts = try await offPool { try admin.metadata(timeout: .seconds(5)).topics }
                return topics.allSatisfy { counts[$0] == partitions }
            } catch {
                return false // a slow answer: ask again
            }
        }
    }

    public func stop() {
        broker.stop()
        storage.stop()
    }
}

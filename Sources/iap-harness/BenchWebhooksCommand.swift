import CommandLineOptions
import Foundation
import HTTPClient
import HTTPServer
import JSON
import JSONSchema
import Kafka
import PipelineHarness
import PurchaseDomain
import PurchaseEvents
import Synchronization
import WorkerRuntime

/// `iap-harness bench webhooks`: `--events` grants forwarded by `iap-webhooks` to a receiver in this process that answers
/// after `--latency-ms`, beside the baseline of the same requests sent straight by one client with as many connections as
/// the worker's endpoint (`--connections`): events/s, the ratio to the baseline, and the worker's CPU per 1,000 events.
enum BenchWebhooksCommand {
    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--events", "--users", "--latency-ms", "--partitions", "--connections", "--store", "--brokers", "--kafka"], flags: ["--json"])
        let count = try options.int("--events") ?? 20_000
        let users = try options.int("--users") ?? 2_000
        let latency = try options.int("--latency-ms") ?? 0
        let partitions = try options.int("--partitions") ?? 12
        let connections = try options.int("--connections") ?? WebhooksFile.defaultConnections
        guard count > 0, users > 0, latency >= 0, partitions > 0, (1...256).contains(connections) else {
            throw UsageError("--events, --users and --partitions must be positive, --connections 1 to 256, --latency-ms 0 or more")
        }
        let json = options.flags.contains("--json")
        let say: (String) -> Void = { if !json { print($0) } }
        let kafka = try options.kafkaConfiguration()
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("iap-bench-webhooks-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let prefix = "bench-webhooks-\(UUID().uuidString.prefix(6).lowercased())."
        let schemas = try JSONSchemaRegistry.eventSchemas()
        let codec = EventCodec(schemas: schemas, source: "/iap-pipeline/granter", topicPrefix: prefix)
        try await KafkaAdmin(kafka: kafka).createTopics([codec.topic(.itemGranted), codec.retryTopic, codec.topic(.deadLetter)], partitions: Int32(partitions))

        // The receiver: counts what it is sent, answering 204 after the latency.
        let received = Atomic<Int>(0)
        let server = try HTTPServer(configuration: .init(maxConnections: 256)) { _ in
            if latency > 0 { try? await Task.sleep(for: .milliseconds(latency)) }
            received.add(1, ordering: .relaxed)
            return HTTPResponse(status: 204)
        }
        defer { server.shutdown() }
        let url = "http://127.0.0.1:\(server.port)/iap"
        let grants = (0..<count).map { index in
            ItemGranted(store: .appstore, transactionId: TransactionID(String(4_000_000_000 + index)), userId: UserID("bench-user-\(index % users)"),
                        productId: ProductID("coins.100"), quantity: 1, items: [GrantedItem(kind: .currency, code: "coins", amount: 100, balance: Int64(100 * (index / users + 1)))],
                        alreadyGranted: false, grantedAt: Date())
        }
        let messages = try grants.map { try codec.message($0, time: Date()) }

        // 1. The baseline: the same bodies POSTed by one client with the endpoint's connections, as many at once.
        let client = HTTPClient(timeout: .seconds(10), maxConnections: connections)
        let baselineStarted = ContinuousClock.now
        for chunk in stride(from: 0, to: count, by: 256) {
            let requests = messages[chunk..<min(chunk + 256, count)].map {
                HTTPClient.Request(method: "POST", url: url, headers: [("Content-Type", "application/json")], body: Array($0.value ?? Data()))
            }
            for case .failure(let failure) in await client.send(all: requests) { throw HarnessError("baseline: \(failure)") }
        }
        let baseline = Double(count) / (ContinuousClock.now - baselineStarted).seconds
        say(String(format: "baseline: %.0f requests/s straight to the receiver", baseline))
        received.store(0, ordering: .relaxed)

        // 2. iap-webhooks, ready before the events are published.
        try Data("bench-secret".utf8).write(to: work.appendingPathComponent("secret"))
        try Data(#"{"endpoints": [{"name": "bench", "url": "\#(url)", "secretFile": "secret", "events": ["item.granted"], "connections": \#(connections)}]}"#.utf8)
            .write(to: work.appendingPathComponent("webhooks.json"))
        let workers = try WorkerProcesses(directory: work, environment: [
            "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrapServers ?? "", "IAP_STORE_URL": options.string("--store") ?? "sqlite:" + work.appendingPathComponent("bench.sqlite").path,
            "IAP_TOPIC_PREFIX": prefix, "IAP_GROUP_PREFIX": prefix, "IAP_SCHEMAS_DIR": schemas.directory ?? "", "IAP_HTTP_PORT": "0", "IAP_HTTP_HOST": "127.0.0.1",
            "IAP_WEBHOOKS_FILE": work.appendingPathComponent("webhooks.json").path, "IAP_LOG_LEVEL": "warning",
        ])
        defer { workers.stopAll() }
        try workers.start("iap-webhooks")
        _ = try await workers.waitUntilReady(["iap-webhooks"], say: say) { nil }
        let pid = workers.pid(of: "iap-webhooks")
        let producer = try KafkaProducer(configuration: .init(kafka: kafka))
        let cpuBefore = pid.flatMap(ProcessAccounting.cpuSeconds) ?? 0
        let started = ContinuousClock.now
        for case .failure(let error) in await producer.send(contentsOf: messages) { throw HarnessError("publishing the grants: \(error)") }
        let published = ContinuousClock.now
        try await waitFor(say, "\(count) events at the receiver", timeout: 600, stalledAfter: 60) {
            let now = received.load(ordering: .relaxed)
            return now >= count ? nil : "\(now) of \(count)"
        }
        let seconds = (ContinuousClock.now - started).seconds
        let cpu = (pid.flatMap(ProcessAccounting.cpuSeconds) ?? 0) - cpuBefore
        let rate = Double(count) / seconds
        let report: [String: JSONValue] = [
            "events": .integer(Int64(count)), "users": .integer(Int64(users)), "partitions": .integer(Int64(partitions)), "latencyMs": .integer(Int64(latency)), "connections": .integer(Int64(connections)),
            "publishSeconds": .number(thousandths((published - started).seconds)), "seconds": .number(thousandths(seconds)),
            "eventsPerSecond": .number(rate.rounded()), "baselineRequestsPerSecond": .number(baseline.rounded()),
            "ratioToBaseline": .number(thousandths(rate / baseline)), "workerCpuSecondsPer1000": .number(thousandths(cpu * 1000 / Double(count))),
        ]
        if json {
            print(String(decoding: JSONValue.object(report).serialized, as: UTF8.self))
        } else {
            say(String(format: "iap-webhooks: %.0f events/s (%.2f of the baseline), %.3f CPU s per 1,000 events", rate, rate / baseline, cpu * 1000 / Double(count)))
        }
        return 0
    }
}

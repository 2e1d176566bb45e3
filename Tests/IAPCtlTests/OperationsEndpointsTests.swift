import Foundation
import Kafka
import StoreFixtures
import Testing
import TestSupport

/// `/metrics`, `/healthz` and `/readyz` of a running worker executable, scraped over HTTP.
@Suite(TestServices.broker, .timeLimit(.minutes(3)))
struct OperationsEndpointsTests {
    /// A verifier on topics of its own, ready (partitions assigned, store reachable), with `arguments` added to its own.
    private func readyVerifier(_ arguments: [String] = []) async throws -> (verifier: ExecutableProcess, base: String, pki: TestPKI, prefix: String, servers: String, directory: URL) {
        let servers = try TestServices.requireBrokers()
        let prefix = "ops\(UUID().uuidString.prefix(6).lowercased())."
        let topics = ["iap.purchase.submitted", "iap.store.notification", "iap.purchase.verified", "iap.purchase.rejected", "iap.deadletter", "iap.retry"]
        let create = ["topics", "create"] + topics.map { prefix + $0 } + ["--partitions", "1", "--brokers", servers]
        #expect(try await VerifyCommandTests.run(create, input: "").status == 0)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ops-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let pki = try TestPKI.make()
        let root = directory.appendingPathComponent("root.pem")
        try Data(pki.root.pemRepresentation.utf8).write(to: root)

        let verifier = try ExecutableProcess("iap-verifier", [
            "--brokers", servers, "--store", "sqlite:" + directory.appendingPathComponent("store.sqlite").path, "--topic-prefix", prefix,
            "--bundle-id", "com.example.coins", "--environment", "Sandbox", "--root", root.path,
            "--http-port", "0", "--http-host", "127.0.0.1", "--statistics-interval", "1", "--shutdown-timeout", "5",
        ] + arguments)
        let base = "http://127.0.0.1:\(try await verifier.httpPort())"
        #expect(try await httpRequest(base + "/healthz").status == 200)
        try await waitUntil("ready (partitions assigned, store reachable)") { try await httpRequest(base + "/readyz").status == 200 }
        return (verifier, base, pki, prefix, servers, directory)
    }

    @Test func aRunningVerifierServesHealthReadinessAndMetricsThatMove() async throws {
        let (verifier, base, pki, prefix, servers, directory) = try await readyVerifier()
        defer { try? FileManager.default.removeItem(at: directory) }

        var metrics = try await httpRequest(base + "/metrics")
        #expect(metrics.status == 200)
        for family in ["iap_messages_total counter", "iap_retries_total counter", "iap_dead_letters_total counter",
                       "iap_handler_duration_seconds histogram", "iap_in_flight_messages gauge", "iap_consumer_lag gauge",
                       "iap_purchases gauge", "iap_oldest_unfinished_purchase_age_seconds gauge", "iap_parked_total counter",
                       "iap_parked_messages gauge", "iap_batch_size histogram", "iap_consumption_reports_waiting gauge"] {
            #expect(metrics.body.contains("# TYPE \(family)"), "declares \(family)")
        }
        #expect(metrics.body.contains("iap_purchases{state=\"verified\",store=\"appstore\"} 0"))
        #expect(metrics.body.contains("iap_purchases{state=\"verified\",store=\"googleplay\"} 0"), "every store is reported from the start")
        #expect(metrics.body.contains("iap_consumption_reports_waiting 0"))
        #expect(metrics.body.contains("iap_parked_messages{stage=\"verifier\"} 0"), "the stage's parked series starts at zero")

        // One valid purchase and one message that is not an event.
        let jws = try JWSSigner(pki: pki).sign(AppStorePayloads.transaction(transactionId: "7001", productId: "coins.100", bundleId: "com.example.coins"))
        let submit = ["submit", "--store", "appstore", "--kind", "signedTransaction", "--user", "u-1", "--topic-prefix", prefix, "--brokers", servers]
        #expect(try await VerifyCommandTests.run(submit, input: jws).status == 0)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        _ = try await producer.send(KafkaProducerMessage(topic: prefix + "iap.purchase.submitted", key: Data("u-2".utf8), value: Data("not json".utf8)))
        await producer.shutdown()

        try await waitUntil("the metrics show both messages") {
            metrics = try await httpRequest(base + "/metrics")
            return metrics.body.contains("iap_messages_total{outcome=\"handled\",stage=\"verifier\"} 1")
                && metrics.body.contains("iap_messages_total{outcome=\"deadLettered\",stage=\"verifier\"} 1")
                && metrics.body.contains("iap_consumer_lag{group=\"iap-verifier\",partition=\"0\",topic=\"\(prefix)iap.purchase.submitted\"} 0")
        }
        #expect(metrics.body.contains("iap_purchases{state=\"verified\",store=\"appstore\"} 1"))
        #expect(metrics.body.contains("iap_handler_duration_seconds_count{stage=\"verifier\"} 2"))
        #expect(metrics.body.contains("iap_events_published_total{stage=\"verifier\",type=\"iap.purchase.verified.v1\"} 1"))
        #expect(metrics.body.contains("iap_events_published_total{stage=\"verifier\",type=\"iap.deadletter.v1\"} 1"))
        #expect(metrics.body.contains("\niap_ready 1\n"))
        #expect(metrics.body.contains("iap_batch_size_sum{stage=\"verifier\"} 2\n"), "both messages went through the stage's batch call")
        #expect(metrics.body.contains("iap_in_flight_messages{stage=\"verifier\"} 0"))
        #expect(metrics.body.range(of: #"iap_dead_letters_total\{reason="[A-Za-z]+",stage="verifier"\} 1"#, options: .regularExpression) != nil)
        let age = metrics.body.split(separator: "\n").first { $0.hasPrefix("iap_oldest_unfinished_purchase_age_seconds{store=\"appstore\"} ") }
            .flatMap { Double($0.split(separator: " ")[1]) }
        #expect((age ?? 0) > 0, "the verified purchase is unfinished")

        // A malformed request gets an error; the endpoints keep answering.
        let port = Int(base.split(separator: ":").last!)!
        #expect(try await offPool { rawHTTP(port: port, "GARBAGE\r\n\r\n") }.hasPrefix("HTTP/1.1 400"))
        #expect(try await httpRequest(base + "/nothing-here").status == 404)
        #expect(try await httpRequest(base + "/healthz").status == 200)
        #expect(!verifier.log.contains { $0.contains(jws) }, "payloads are never logged")
        #expect(try await verifier.terminate() == 0)
    }

    /// The store-wide gauges are the same in every worker: one left out of them (`--store-gauges false`) still reports its own.
    @Test func aWorkerWithoutStoreGaugesReportsItsOwnSeriesOnly() async throws {
        let (verifier, base, _, _, _, directory) = try await readyVerifier(["--store-gauges", "false"])
        defer { try? FileManager.default.removeItem(at: directory) }
        let metrics = try await httpRequest(base + "/metrics")
        #expect(metrics.status == 200)
        for family in ["iap_messages_total counter", "iap_in_flight_messages gauge", "iap_batch_size histogram"] {
            #expect(metrics.body.contains("# TYPE \(family)"), "declares \(family)")
        }
        for family in ["iap_purchases", "iap_oldest_unfinished_purchase_age_seconds", "iap_store_up", "iap_parked_messages", "iap_consumption_reports_waiting"] {
            #expect(!metrics.body.contains("# TYPE \(family) "), "leaves out \(family)")
        }
        #expect(try await verifier.terminate() == 0)
    }

    @Test func aStoreGaugesSettingThatIsNotABooleanIsRefused() async throws {
        let servers = try TestServices.requireBrokers()
        let process = try ExecutableProcess("iap-verifier", [
            "--brokers", servers, "--store", "sqlite::memory:", "--bundle-id", "com.example.coins", "--store-gauges", "sometimes",
        ])
        try await waitUntil("the verifier exits") { !process.process.isRunning }
        #expect(process.process.terminationStatus != 0)
        #expect(process.log.contains { $0.contains("--store-gauges (IAP_STORE_GAUGES) must be true or false, got 'sometimes'") })
    }
}

import Foundation
import JSON
import PurchaseDomain
import StoreFixtures
import Testing
import TestSupport

/// The alert rules and the dashboard on a real Prometheus (Debian's) scraping the worker executables: every series they
/// name is one a worker exports, every dashboard query is valid PromQL, and a stopped worker's alert fires after its
/// `for:` and resolves once the worker is back.
@Suite(TestServices.broker, TestServices.prometheus, .timeLimit(.minutes(6)))
struct PrometheusAlertTests {
    @Test func aStoppedWorkerFiresItsAlertOnARealPrometheusAndResolvesAfterItsRestart() async throws {
        let servers = try TestServices.requireBrokers()
        let prometheusBinary = try TestServices.requirePrometheus("prometheus")
        let prefix = "prom\(UUID().uuidString.prefix(6).lowercased())."
        #expect(try await VerifyCommandTests.run(["topics", "create", "--all", "--topic-prefix", prefix, "--partitions", "1", "--brokers", servers],
                                                 input: "").status == 0)
        let directory = try TestDirectory("prometheus")
        defer { directory.remove() }
        let file = directory.file

        // The workers, each with what makes it export its store-facing series: the sweeper reconciles with a stand-in
        // Google Play (voided purchases) and counts purchases near their deadline.
        let package = "com.example.coins"
        let googlePlay = try GooglePlayAPIStandIn(purchases: [:])
        let googlePlayAPI = ["--googleplay-api-url", googlePlay.baseURL.absoluteString,
                             "--googleplay-service-account", try file("service-account.json", try googlePlay.serviceAccountKeyJSON())]
        let googlePlaySettings = googlePlayAPI + ["--googleplay-app", "\(package)=" + (try file("googleplay.pub", try GooglePlaySigner().publicKeyBase64()))]
        let catalog = TestServices.packageRoot.appendingPathComponent("schemas/examples/catalog.json").path
        let common = ["--brokers", servers, "--store", "sqlite:" + directory.path("store.sqlite"), "--topic-prefix", prefix,
                      "--group-prefix", prefix, "--shutdown-timeout", "5", "--http-host", "127.0.0.1"]
        let arguments: [String: [String]] = [
            "iap-verifier": ["--bundle-id", package, "--environment", "Sandbox", "--root", try file("root.pem", try TestPKI.make().root.pemRepresentation),
                             "--catalog", catalog] + googlePlaySettings,
            "iap-granter": ["--catalog", catalog],
            "iap-finisher": googlePlayAPI,
            "iap-sweeper": googlePlaySettings,
            // An endpoint nothing listens at: no event is published here, so nothing is tried.
            "iap-webhooks": ["--webhooks", try file("webhooks.json", #"{"endpoints": [{"name": "backend", "url": "http://127.0.0.1:9/iap", "secretFile": "webhook.secret"}]}"#)],
        ]
        _ = try file("webhook.secret", "s3cret")
        func start(_ name: String, port: Int = 0) throws -> ExecutableProcess {
            try ExecutableProcess(name, common + ["--http-port", String(port)] + arguments[name, default: []])
        }
        let names = ["iap-verifier", "iap-granter", "iap-finisher", "iap-sweeper", "iap-webhooks"]
        var workers: [String: ExecutableProcess] = [:]
        var ports: [String: Int] = [:]
        for name in names {
            workers[name] = try start(name)
            ports[name] = try await workers[name]!.httpPort()
        }
        // And the ingest, whose operations port is its own.
        let ingest = try ExecutableProcess("iap-ingest", ["--brokers", servers, "--store", "sqlite:" + directory.path("store.sqlite"),
                                                          "--topic-prefix", prefix, "--shutdown-timeout", "5", "--http-port", "0", "--http-host", "127.0.0.1",
                                                          "--ops-port", "0", "--ops-host", "127.0.0.1"])
        let scraped = names.map { ports[$0]! } + [try await ingest.operationsPort()]
        for port in scraped {
            try await waitUntil("the process on \(port) is ready") { try await httpRequest("http://127.0.0.1:\(port)/readyz").status == 200 }
        }

        // What the rules and the dashboard read is what the workers export.
        var exported: Set<String> = []
        for port in scraped { exported.formUnion(MonitoringFiles.exportedNames(try await httpRequest("http://127.0.0.1:\(port)/metrics").body)) }
        let rules = MonitoringFiles.metricNames(in: try MonitoringFiles.text(MonitoringFiles.rules))
        let expressions = try MonitoringFiles.dashboardExpressions()
        let dashboard = expressions.reduce(into: Set<String>()) { $0.formUnion(MonitoringFiles.metricNames(in: $1)) }
        #expect(rules.count >= 12 && dashboard.count >= 20, "rules read \(rules.sorted()), the dashboard \(dashboard.sorted())")
        #expect(rules.subtracting(exported).isEmpty, "the rules read series no worker exports: \(rules.subtracting(exported).sorted())")
        #expect(dashboard.subtracting(exported).isEmpty, "the dashboard reads series no worker exports: \(dashboard.subtracting(exported).sorted())")

        // Prometheus, scraping and evaluating every second, with the rules as shipped.
        let targets = scraped.map { "\"127.0.0.1:\($0)\"" }.joined(separator: ", ")
        let configuration = try file("prometheus.yaml", """
            global: { scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s }
            rule_files: ["\(MonitoringFiles.rules.path)"]
            scrape_configs:
              - job_name: iap-pipeline
                static_configs: [{ targets: [\(targets)] }]
            """)
        let (prometheus, base) = try await onFreshPorts(1) { fresh in
            let process = try BackgroundProcess(prometheusBinary, ["--config.file=\(configuration)", "--storage.tsdb.path=\(directory.path("tsdb"))",
                                                                   "--web.listen-address=127.0.0.1:\(fresh[0])"])
            let base = "http://127.0.0.1:\(fresh[0])"
            try await waitUntil("Prometheus is ready") {
                guard process.isRunning else { return true }
                return (try? await httpRequest(base + "/-/ready").status) == 200
            }
            guard process.isRunning else { throw ExitedBeforeListening(process.output) }
            return (process, base)
        }
        defer { prometheus.stop() }
        func query(_ expression: String) async throws -> [String: JSONValue] {
            let encoded = try #require(expression.addingPercentEncoding(withAllowedCharacters: .alphanumerics))
            let answer = try await httpRequest(base + "/api/v1/query?query=" + encoded)
            return try #require(JSONValue.parse(Array(answer.body.utf8))?.objectValue, "\(answer.body)")
        }
        try await waitUntil("Prometheus scrapes every worker") {
            let answer = try await query("count(up{job=\"iap-pipeline\"} == 1)")
            return answer["data"]?.objectValue?["result"]?.arrayValue?.first?.objectValue?["value"]?.arrayValue?.last?.stringValue == String(scraped.count)
        }
        for expression in expressions {
            let answer = try await query(expression)
            #expect(answer["status"]?.stringValue == "success", "\(expression): \(answer["error"]?.stringValue ?? "")")
        }
        let loaded = try #require(JSONValue.parse(Array(try await httpRequest(base + "/api/v1/rules?type=alert").body.utf8))?.objectValue)
        let loadedAlerts = (loaded["data"]?.objectValue?["groups"]?.arrayValue ?? []).flatMap { $0.objectValue?["rules"]?.arrayValue ?? [] }
        #expect(loadedAlerts.count == (try MonitoringFiles.alertNames()).count, "Prometheus loaded every rule")

        /// The alerts named `alert` for the finisher's instance, by state.
        let instance = "127.0.0.1:\(ports["iap-finisher"]!)"
        func finisherDown() async throws -> [String] {
            let answer = try #require(JSONValue.parse(Array(try await httpRequest(base + "/api/v1/alerts").body.utf8))?.objectValue)
            return (answer["data"]?.objectValue?["alerts"]?.arrayValue ?? []).compactMap(\.objectValue).filter {
                $0["labels"]?.objectValue?["alertname"]?.stringValue == "IAPWorkerDown" && $0["labels"]?.objectValue?["instance"]?.stringValue == instance
            }.compactMap { $0["state"]?.stringValue }
        }
        #expect(try await finisherDown().isEmpty, "no alert while every worker answers")

        // The finisher stops: after the rule's `for: 1m`, plus a scrape and an evaluation, its alert fires.
        let stopping = ContinuousClock.now
        #expect(try await workers["iap-finisher"]!.terminate() == 0)
        let exited = ContinuousClock.now
        try await waitUntil("IAPWorkerDown fires for the stopped finisher", timeout: .seconds(120)) { try await finisherDown() == ["firing"] }
        #expect(ContinuousClock.now - stopping >= .seconds(60), "not before its for:")
        // Its `for:`, a scrape and an evaluation (a second each), and room for a loaded machine's scheduling.
        #expect(ContinuousClock.now - exited <= .seconds(60 + 1 + 1 + 13), "within its for: plus a scrape and an evaluation")

        // Back on the same port: the alert resolves.
        workers["iap-finisher"] = try start("iap-finisher", port: ports["iap-finisher"]!)
        try await waitUntil("the alert resolves once the finisher answers again", timeout: .seconds(60)) { try await finisherDown().isEmpty }
        for worker in workers.values { #expect(try await worker.terminate() == 0) }
        #expect(try await ingest.terminate() == 0)
    }
}

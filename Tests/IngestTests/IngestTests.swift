import Foundation
import Ingest
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import JSON
import RequestSigning
import StoreFixtures
import Testing
import TestSupport

/// `iap-ingest` as a process, over real HTTP, against the broker.
@Suite(TestServices.broker, .timeLimit(.minutes(5)))
struct IngestTests {
    /// A started `iap-ingest` on fresh topics.
    struct Running {
        let process: ExecutableProcess
        let base: String
        let prefix: String
        let servers: String

        init(brokers: String? = nil, _ extra: [String] = []) async throws {
            servers = try TestServices.requireBrokers()
            prefix = "ing\(UUID().uuidString.prefix(6).lowercased())."
            if brokers == nil {
                let topics = ["topics", "create", prefix + "iap.store.notification", prefix + "iap.purchase.submitted", "--partitions", "2", "--brokers", servers]
                #expect(try await ExecutableProcess.run("iapctl", topics).status == 0)
            }
            process = try ExecutableProcess("iap-ingest", ["--brokers", brokers ?? servers, "--topic-prefix", prefix, "--http-port", "0",
                                                           "--http-host", "127.0.0.1"] + extra)
            base = "http://127.0.0.1:\(try await process.httpPort())"
        }

        /// The events on a topic, as `iapctl tail` prints them.
        func events(_ topic: String, count: Int) async throws -> [[String: JSONValue]] {
            let arguments = ["tail", "--topic", prefix + topic, "--from-beginning", "--max", String(count), "--timeout", "90", "--brokers", servers]
            return try await ExecutableProcess.run("iapctl", arguments).lines.compactMap { JSONValue.parse(Array($0.utf8))?.objectValue }
        }
    }

    static func notificationBody(_ pki: TestPKI) throws -> (body: Data, payload: String) {
        let payload = try JWSSigner(pki: pki).sign(AppStorePayloads.notification(type: .consumptionRequest, bundleId: "com.example.coins", appAppleId: nil,
                                                                                 signedTransactionInfo: nil))
        return (Data(try JSONEncoder().encode(JSONValue.object(["signedPayload": .string(payload)]))), payload)
    }

    @Test func notificationsAndSubmissionsBecomeEventsAndBadRequestsAreAnsweredWithReasons() async throws {
        let secretFile = FileManager.default.temporaryDirectory.appendingPathComponent("ingest-secret-\(UUID().uuidString)")
        try Data("s3cret\n".utf8).write(to: secretFile)
        defer { try? FileManager.default.removeItem(at: secretFile) }
        let ingest = try await Running(["--client-secret-file", secretFile.path, "--max-body-bytes", "8192"])
        try await waitUntil("ready") { try await httpRequest(ingest.base + "/readyz").status == 200 }

        let pki = try TestPKI.make()
        let notification = try Self.notificationBody(pki)
        let first = try await httpRequest(ingest.base + "/v1/appstore/notifications", method: "POST", body: notification.body)
        #expect(first.status == 200, "\(first.body)")
        let id = JSONValue.parse(Array(first.body.utf8))?.objectValue?["id"]?.stringValue
        let retry = try await httpRequest(ingest.base + "/v1/appstore/notifications", method: "POST", body: notification.body)
        #expect(retry.status == 200)
        #expect(JSONValue.parse(Array(retry.body.utf8))?.objectValue?["id"]?.stringValue == id, "Apple's retry carries the same id")

        let events = try await ingest.events("iap.store.notification", count: 2)
        #expect(events.count == 2)
        for event in events {
            #expect(event["value"]?.objectValue?["signedPayload"]?.stringValue == notification.payload)
            #expect(event["headers"]?.objectValue?["ce_type"] == .string("iap.store.notification.v1"))
            #expect(event["headers"]?.objectValue?["ce_id"]?.stringValue == id)
        }

        // Bad requests: each answered with a reason, nothing published.
        let bad: [(String, Data, Int, String)] = [
            ("/v1/appstore/notifications", Data("{not json".utf8), 400, "invalidJSON"),
            ("/v1/appstore/notifications", Data(#"{"payload":"a.b.c"}"#.utf8), 400, "missingSignedPayload"),
            ("/v1/appstore/notifications", Data(#"{"signedPayload":"a.b"}"#.utf8), 400, "malformedSignedPayload"),
            ("/v1/appstore/notifications", Data(String(repeating: "[", count: 10_000).utf8), 413, "larger than"),
            ("/v1/appstore/notifications", Data(String(repeating: "[", count: 5_000).utf8), 400, "tooDeep"),
            ("/v1/appstore/notifications", Data(#"{"signedPayload":"a.b.c","signedPayload":"d.e.f"}"#.utf8), 400, "duplicateKey"),
            // Refused as it parses: a value per 2 bytes would take tens of times the body's size once built.
            ("/v1/appstore/notifications", Data((#"{"signedPayload":["# + Array(repeating: "[0]", count: 300).joined(separator: ",") + "]}").utf8), 400, "tooManyValues"),
        ]
        for (path, body, status, reason) in bad {
            let answer = try await httpRequest(ingest.base + path, method: "POST", body: body)
            #expect(answer.status == status, "\(path) \(answer.body)")
            #expect(answer.body.contains(reason))
        }
        #expect(try await httpRequest(ingest.base + "/v1/appstore/notifications").status == 405)
        // Members besides signedPayload are checked and dropped unbuilt, not refused, however many values they hold: the
        // same event as without them.
        let extra = Data((#"{"version":"2.1","signedPayload":"\#(notification.payload)","x":["# + Array(repeating: "[0]", count: 1_000).joined(separator: ",") + "]}").utf8)
        let reduced = try await httpRequest(ingest.base + "/v1/appstore/notifications", method: "POST", body: extra)
        #expect(reduced.status == 200, "\(reduced.body)")
        #expect(JSONValue.parse(Array(reduced.body.utf8))?.objectValue?["id"]?.stringValue == id, "the same event as without them")

        // Slow clients (headers never finished) hold a connection each, not the server.
        let port = Int(ingest.base.split(separator: ":").last!)!
        let slow = (0..<5).map { _ in rawConnect(port: port, sending: "POST /v1/appstore/notifications HTTP/1.1\r\nContent-Length: 100\r\n") }
        defer { slow.forEach { close($0) } }
        #expect(slow.allSatisfy { $0 >= 0 })
        #expect(try await httpRequest(ingest.base + "/v1/appstore/notifications", method: "POST", body: notification.body).status == 200)

        // Client submissions: signed with the shared secret, else 401.
        let submission = Data(#"{"store":"appstore","kind":"signedTransaction","signedTransaction":"\#(try JWSSigner(pki: pki).sign(AppStorePayloads.transaction(transactionId: "9", productId: "coins.100", bundleId: "com.example.coins")))","userId":"u-1","submissionId":"0f8fad5b-d9cb-469f-a165-70867728950e"}"#.utf8)
        func signature(_ body: Data, at time: Date = Date()) -> [String: String] {
            RequestSignature.headers(secret: Data("s3cret".utf8), method: "POST", path: "/v1/purchases", body: body, now: time)
        }
        #expect(try await httpRequest(ingest.base + "/v1/purchases", method: "POST", body: submission).status == 401)
        #expect(try await httpRequest(ingest.base + "/v1/purchases", method: "POST", body: submission,
                                      headers: signature(submission + Data(" ".utf8))).status == 401, "signed for another body")
        let replayed = try await httpRequest(ingest.base + "/v1/purchases", method: "POST", body: submission,
                                             headers: signature(submission, at: Date().addingTimeInterval(-600)))
        #expect(replayed.status == 401 && replayed.body.contains("x-iap-timestamp"), "a captured request replayed outside the window: \(replayed.body)")
        let accepted = try await httpRequest(ingest.base + "/v1/purchases", method: "POST", body: submission, headers: signature(submission))
        #expect(accepted.status == 202, "\(accepted.body)")
        let flood = Data((#"{"store":"appstore","kind":"signedTransaction","userId":"u-1","x":["# + Array(repeating: "[0]", count: 300).joined(separator: ",") + "]}").utf8)
        let flooded = try await httpRequest(ingest.base + "/v1/purchases", method: "POST", body: flood, headers: signature(flood))
        #expect(flooded.status == 400 && flooded.body.contains("tooManyValues"), "refused as it parses, before the schema: \(flooded.body)")
        let invalid = Data(#"{"store":"appstore","kind":"signedTransaction","userId":"u-1"}"#.utf8)
        let refused = try await httpRequest(ingest.base + "/v1/purchases", method: "POST", body: invalid, headers: signature(invalid))
        #expect(refused.status == 400)
        #expect(refused.body.contains("schemaViolation"))
        let submitted = try await ingest.events("iap.purchase.submitted", count: 1)
        #expect(submitted.first?["value"]?.objectValue?["source"] == .string("client"), "filled in")
        #expect(submitted.first?["headers"]?.objectValue?["ce_id"] == .string("submitted:0f8fad5b-d9cb-469f-a165-70867728950e"))
        #expect(submitted.first?["key"] == .string("u-1"))

        let metrics = try await httpRequest(ingest.base + "/metrics").body
        #expect(metrics.contains(#"iap_ingest_requests_total{route="notifications",status="200"} 4"#))
        #expect(metrics.contains(#"iap_ingest_requests_total{route="purchases",status="401"} 3"#))
        #expect(!ingest.process.log.contains { $0.contains("s3cret") || $0.contains(notification.payload) }, "no secret or payload in the log")
        #expect(try await ingest.process.terminate() == 0)
    }

    /// With `--ops-port`, operators get metrics and readiness reasons there (on `--ops-host`'s address only); the public
    /// port tells only ready or not. A notification larger than the verifier accepts is refused at the door.
    @Test func theOperationsPortKeepsReasonsAndMetricsOffThePublicPort() async throws {
        let ingest = try await Running(brokers: "127.0.0.1:1", ["--ops-port", "0", "--ops-host", "127.0.0.2"])
        let operationsPort = try await ingest.process.operationsPort()
        let operations = "http://127.0.0.2:\(operationsPort)"
        // Not bound to --http-host's 127.0.0.1: nothing answers there, or (the same port number taken on that address by
        // another test's server) not this ops port.
        let elsewhere = rawHTTP(port: operationsPort, "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        #expect(!elsewhere.contains("broker"), "not bound to --http-host's 127.0.0.1: \(elsewhere)")
        let publicReady = try await httpRequest(ingest.base + "/readyz")
        #expect(publicReady.status == 503 && publicReady.body == "not ready\n", "no internal reasons on the public port: \(publicReady.body)")
        let opsReady = try await httpRequest(operations + "/readyz")
        #expect(opsReady.status == 503 && opsReady.body.contains("broker"), "\(opsReady.body)")
        #expect(try await httpRequest(ingest.base + "/metrics").status == 404)
        #expect(try await httpRequest(operations + "/metrics").body.contains("iap_ingest_requests_total"))
        #expect(try await httpRequest(ingest.base + "/healthz").status == 200)
        #expect(try await httpRequest(operations + "/v1/users/u").status == 404, "no API on the ops port")

        let segment = String(repeating: "A", count: 70 * 1024)
        let large = Data(#"{"signedPayload":"\#(segment).\#(segment).c2ln"}"#.utf8)
        let answer = try await httpRequest(ingest.base + "/v1/appstore/notifications", method: "POST", body: large)
        #expect(answer.status == 413 && answer.body.contains("payloadTooLarge"), "\(answer.status) \(answer.body)")
        // Refused before it is parsed: 200 KiB of numbers would take many times that as parsed values.
        let numbers = Data((#"{"a":["# + String(repeating: "1,", count: 100 * 1024) + #"1]}"#).utf8)
        let unparsed = try await httpRequest(ingest.base + "/v1/appstore/notifications", method: "POST", body: numbers)
        #expect(unparsed.status == 413 && unparsed.body.contains("payloadTooLarge"), "\(unparsed.status) \(unparsed.body)")
        // Refused on its Content-Length alone: the head is answered, not a byte of the body sent (within --max-body-bytes,
        // over what the route takes).
        let port = Int(ingest.base.split(separator: ":").last!)!
        let head = try await offPool {
            rawHTTP(port: port, "POST /v1/appstore/notifications HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 262144\r\n\r\n")
        }
        #expect(head.hasPrefix("HTTP/1.1 413") && head.contains("payloadTooLarge"), "\(head)")
        // Counted though no handler saw them: the three refusals on their Content-Length, on the route they were for.
        let metrics = try await httpRequest(operations + "/metrics").body
        #expect(metrics.contains(#"iap_ingest_requests_total{route="notifications",status="413"} 3"#), "\(metrics.split(separator: "\n").filter { $0.contains("requests_total") })")
        #expect(try await ingest.process.terminate() == 0)
    }

    /// A few hundred slow connections from one address on the operations port, each holding the start of a head: its
    /// probes are still answered by their handlers, not refused as busy, so a flood cannot trigger liveness restarts.
    @Test func slowClientsCannotFailTheOperationsPortsProbes() async throws {
        let ingest = try await Running(brokers: "127.0.0.1:1", ["--ops-port", "0"])
        let port = try await ingest.process.operationsPort()
        let slow = try await offPool { (0..<300).map { _ in rawConnect(port: port, sending: "GET /healthz HTTP/1.1\r\nHost: a\r\nX-Slow: ") } }
        #expect(slow.allSatisfy { $0 >= 0 })
        for _ in 0..<10 {
            let health = try await offPool { rawHTTP(port: port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n") }
            #expect(health.hasPrefix("HTTP/1.1 200"), "\(health)")
            let ready = try await offPool { rawHTTP(port: port, "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n") }
            #expect(ready.hasPrefix("HTTP/1.1 503") && ready.contains("broker"), "not ready, with the readiness's reason: \(ready)")
        }
        slow.forEach { close($0) }
        #expect(try await ingest.process.terminate() == 0)
    }

    /// A budget smaller than the largest body would refuse that body for good: the ingest does not start with one.
    @Test func aBodyBudgetSmallerThanTheLargestBodyIsRefusedAtStart() async throws {
        let refused = try ExecutableProcess("iap-ingest", ["--brokers", "127.0.0.1:1", "--http-port", "0", "--max-body-bytes", "65536",
                                                           "--body-budget-bytes", "65535"])
        let message = try await refused.waitForLog("--body-budget-bytes")
        try await waitUntil("it exits") { !refused.process.isRunning }
        #expect(refused.process.terminationStatus == 2 && message.contains("at least --max-body-bytes"), "\(refused.log)")
        let started = try await Running(brokers: "127.0.0.1:1", ["--max-body-bytes", "65536", "--body-budget-bytes", "65536"])
        #expect(try await httpRequest(started.base + "/healthz").status == 200, "a budget of one largest body is enough")
        #expect(try await started.process.terminate() == 0)
    }

    @Test func anUnreachableBrokerIsAnswered503AndNotReady() async throws {
        let ingest = try await Running(brokers: "127.0.0.1:1", ["--publish-timeout", "2"])
        let notification = try Self.notificationBody(try TestPKI.make())
        let answer = try await httpRequest(ingest.base + "/v1/appstore/notifications", method: "POST", body: notification.body)
        #expect(answer.status == 503, "\(answer.body)")
        #expect(answer.body.contains("brokerUnavailable"))
        let ready = try await httpRequest(ingest.base + "/readyz")
        #expect(ready.status == 503)
        #expect(try await httpRequest(ingest.base + "/healthz").status == 200, "alive, only not ready")
        #expect(try await ingest.process.terminate() == 0)
    }

    @Test func aThousandConcurrentNotificationsAreEachOnTheTopicUnderOneId() async throws {
        let ingest = try await Running()
        try await waitUntil("ready") { try await httpRequest(ingest.base + "/readyz").status == 200 }
        let pki = try TestPKI.make()
        let bodies = try (0..<1_000).map { _ in try Self.notificationBody(pki) }
        let configuration = URLSessionConfiguration.default
        configuration.httpMaximumConnectionsPerHost = 1_000
        configuration.timeoutIntervalForRequest = 60
        let session = URLSession(configuration: configuration)
        let url = URL(string: ingest.base + "/v1/appstore/notifications")!
        // Like Apple, a caller retries until it gets a 200.
        let answers = try await withThrowingTaskGroup(of: (payload: String, id: String?, attempts: Int).self) { group in
            for notification in bodies {
                group.addTask {
                    var request = URLRequest(url: url)
                    request.httpMethod = "POST"
                    request.httpBody = notification.body
                    for attempt in 1...20 {
                        if let (data, response) = try? await session.data(for: request), (response as? HTTPURLResponse)?.statusCode == 200 {
                            return (notification.payload, JSONValue.parse(Array(data))?.objectValue?["id"]?.stringValue, attempt)
                        }
                        try await Task.sleep(for: .milliseconds(50 * attempt))
                    }
                    return (notification.payload, nil, 20)
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(answers.allSatisfy { $0.id != nil }, "every notification was acknowledged in the end")
        // A 503 for "busy" published nothing, so exactly one event per notification is expected.
        let events = try await ingest.events("iap.store.notification", count: answers.count)
        let retried = answers.filter { $0.attempts > 1 }.count
        print("1,000 concurrent notifications: \(retried) needed a retry")
        var idsByPayload: [String: Set<String>] = [:]
        for event in events {
            guard let payload = event["value"]?.objectValue?["signedPayload"]?.stringValue, let id = event["headers"]?.objectValue?["ce_id"]?.stringValue else { continue }
            idsByPayload[payload, default: []].insert(id)
        }
        #expect(Set(answers.map(\.payload)).isSubset(of: Set(idsByPayload.keys)), "every acknowledged notification is on the topic")
        #expect(idsByPayload.values.allSatisfy { $0.count == 1 }, "none twice with different ids")
        // An answer without an id fails here, not the whole test process (a force unwrap would).
        #expect(answers.allSatisfy { answer in answer.id.map { idsByPayload[answer.payload] == [$0] } ?? false }, "each under the id it was answered with")
        #expect(try await ingest.process.terminate() == 0)
    }
}

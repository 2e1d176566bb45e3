import Foundation
import HTTPServer
import JSON
import JSONSchema
import Kafka
import PurchaseDomain
import PurchaseEvents
import RequestSigning
import Testing
import TestSupport

/// `iap-webhooks` against a receiver in the test process, through the broker: every event arrives once, each user's in
/// the order the pipeline published them, through 30 s in which the receiver is down (retried, parked, re-driven). Beside
/// it, the Python receiver of docs/webhooks.md, as written, takes the same events signed with its own secret, and is not held back.
@Suite(TestServices.broker, TestServices.pythonTools, .timeLimit(.minutes(8)))
struct WebhookDeliveryTests {
    /// The receiver: checks each request's signature (refusing a bad one with 401), keeps what it accepted.
    final class Receiver: Sendable {
        struct Delivery: Sendable {
            /// The `ce-id`, and `#repeat` for a grant answered `alreadyGranted` (sent too, with the first's id).
            let id: String
            let user: String
            let transaction: String
        }

        let secret: Data
        /// Down: what still reaches the handler (a connection kept alive across the shutdown) is answered 503.
        let down = Locked(false)
        let accepted = Locked<[Delivery]>([])
        let refusedSignatures = Locked(0)
        let server = Locked<HTTPServer?>(nil)

        init(secret: Data) { self.secret = secret }

        /// Listens on `port` (0: any free one) and answers.
        func start(port: UInt16 = 0) throws -> UInt16 {
            let (secret, accepted, refused, down) = (secret, accepted, refusedSignatures, down)
            down.withLock { $0 = false }
            let server = try HTTPServer(configuration: .init(port: port), synchronousHandler: { request in
                if down.withLock({ $0 }) { return HTTPResponse(status: 503) }
                guard case .success = RequestSignature.verify(request, secret: secret) else {
                    refused.withLock { $0 += 1 }
                    return HTTPResponse(status: 401)
                }
                let body = JSONValue.parse(Array(request.body))?.objectValue
                accepted.withLock {
                    $0.append(Delivery(id: (request.header("ce-id") ?? "") + (body?["alreadyGranted"] == .bool(true) ? "#repeat" : ""),
                                       user: body?["userId"]?.stringValue ?? "", transaction: body?["transactionId"]?.stringValue ?? ""))
                }
                return HTTPResponse(status: 204)
            })
            self.server.withLock { $0 = server }
            return server.port
        }

        func stop() {
            down.withLock { $0 = true }
            server.withLock { $0?.shutdown(); $0 = nil }
        }
        var deliveries: [Delivery] { accepted.withLock { $0 } }
    }

    @Test func eachEventArrivesOnceInEachUsersOrderThroughAReceiverOutage() async throws {
        let servers = try TestServices.requireBrokers()
        let prefix = "wh\(UUID().uuidString.prefix(6).lowercased())."
        let topics = ["iap.item.granted", "iap.user.adjusted", "iap.retry", "iap.deadletter"].map { prefix + $0 }
        #expect(try await VerifyCommandTests.run(["topics", "create"] + topics + ["--partitions", "2", "--brokers", servers], input: "").status == 0)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("webhooks-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }

        let secret = Data("s3cret-for-the-receiver".utf8)
        try Data("s3cret-for-the-receiver\n".utf8).write(to: directory.appendingPathComponent("receiver.secret"))
        let receiver = Receiver(secret: secret)
        let port = try receiver.start()
        let python = try await Self.readmeReceiver(secretFile: directory.appendingPathComponent("python.secret"), directory: directory)
        try Data("""
            {"endpoints": [{"name": "receiver", "url": "http://127.0.0.1:\(port)/hooks/iap?app=coins", "secretFile": "receiver.secret",
                            "events": ["item.granted", "user.adjusted"]},
                           {"name": "python", "url": "http://localhost:\(python.port)/iap", "secretFile": "python.secret", "events": ["item.granted"]}]}
            """.utf8).write(to: directory.appendingPathComponent("webhooks.json"))
        // A retry budget shorter than the outage: the events park, and come back from the retry topic in order (tried again
        // after 5 s, not the default minute, so that the test does not wait for it).
        let worker = try ExecutableProcess("iap-webhooks", [
            "--brokers", servers, "--topic-prefix", prefix, "--store", "sqlite:" + directory.appendingPathComponent("store.sqlite").path,
            "--webhooks", directory.appendingPathComponent("webhooks.json").path, "--retry-budget", "5", "--parked-delay", "5", "--shutdown-timeout", "5",
            "--http-port", "0",
        ])

        let schemas = try JSONSchemaRegistry(directory: TestServices.packageRoot.appendingPathComponent("schemas"))
        let codec = EventCodec(schemas: schemas, source: "/iap-pipeline/granter", topicPrefix: prefix)
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        let users = (1...6).map { "user-\($0)" }
        var sequence = 0
        /// Each user's next grant, in turn; every fourth user's grant is also repeated (`alreadyGranted`, the same `ce-id`), as a
        /// restore is answered: sent too, and told apart here by its body.
        func publishRound() async throws -> [String] {
            var ids: [String] = []
            for (index, user) in users.enumerated() {
                sequence += 1
                let grant = ItemGranted(store: .appstore, transactionId: TransactionID("\(1000 + sequence)"), userId: UserID(user), productId: ProductID("coins.100"),
                                        quantity: 1, items: [GrantedItem(kind: .currency, code: "coins", amount: 100, balance: Int64(100 * sequence))],
                                        alreadyGranted: false, grantedAt: Date())
                var events = [grant]
                if index % 4 == 0 {
                    var repeated = grant
                    repeated.alreadyGranted = true
                    events.append(repeated)
                }
                for event in events {
                    _ = try await producer.send(try codec.message(event, time: Date()))
                    ids.append(event.eventID + (event.alreadyGranted ? "#repeat" : ""))
                }
            }
            return ids
        }

        var expected: [String] = []
        for _ in 0..<2 { expected += try await publishRound() }
        try await waitUntil("the receiver has the first \(expected.count) events", timeout: .seconds(150)) { receiver.deliveries.count >= expected.count }

        // The outage: 30 s without a listener, the events published meanwhile retried, then parked.
        receiver.stop()
        let outage = ContinuousClock.now
        for _ in 0..<3 { expected += try await publishRound() }
        do { _ = try await worker.waitForLog("parked on the retry topic", timeout: .seconds(60)) } catch {
            Issue.record("nothing parked: \(worker.log.filter { !$0.contains("re-driven") }.suffix(40).joined(separator: "\n"))")
            throw error
        }
        // The other endpoint is not held back: the documented receiver takes every event while this one is down.
        try await waitUntil("the Python receiver has all \(expected.count) events", timeout: .seconds(150)) {
            python.received.count >= expected.count || !python.process.isRunning
        }
        // It prints each ce-id, a repeat's as its first's.
        let printed = expected.map { $0.replacingOccurrences(of: "#repeat", with: "") }.sorted()
        #expect(python.received.sorted() == printed, "docs/webhooks.md's receiver: each event once, verified; output:\n\(python.process.output.suffix(2_000))")
        #expect(receiver.deliveries.count == 16, "nothing reached the receiver while it was down")
        try await Task.sleep(until: outage + .seconds(30))
        #expect(try receiver.start(port: port) == port)

        try await waitUntil("the receiver has all \(expected.count) events", timeout: .seconds(300)) { receiver.deliveries.count >= expected.count }
        // Nothing more comes: nothing parked is left to re-drive, and the consumer is at the end of its partitions.
        let operations = try await worker.httpPort()
        try await waitUntil("nothing is left parked", timeout: .seconds(60)) {
            let metrics = try await httpRequest("http://127.0.0.1:\(operations)/metrics").body
            return metrics.split(separator: "\n").contains { $0.hasPrefix("iap_parked_messages{") && $0.hasSuffix(" 0") }
                && !metrics.split(separator: "\n").contains { $0.hasPrefix("iap_parked_messages{") && !$0.hasSuffix(" 0") }
        }
        let deliveries = receiver.deliveries
        #expect(deliveries.map(\.id).sorted() == expected.sorted(), "each event once")
        for user in users {
            let order = deliveries.filter { $0.user == user }.map(\.transaction)
            #expect(order == order.sorted { Int($0)! < Int($1)! }, "\(user)'s events in the order published: \(order)")
            let sent = deliveries.filter { $0.user == user }.map(\.id)
            #expect(sent == expected.filter { sent.contains($0) }, "\(user)'s repeats right after their first")
        }
        #expect(receiver.refusedSignatures.withLock { $0 } == 0)
        #expect(worker.log.contains { $0.contains("parked on the retry topic") }, "the outage outlasted the retry budget")
        let metrics = try await httpRequest("http://127.0.0.1:\(operations)/metrics").body
        #expect(metrics.contains(#"iap_webhook_events_total{endpoint="receiver",outcome="delivered",type="iap.item.granted.v1"} \#(expected.count)"#), "\(metrics)")
        #expect(python.received.sorted() == printed)
        #expect(try await worker.terminate() == 0)
        receiver.stop()
        python.process.stop()
    }

    /// docs/webhooks.md's receiver (`test: webhook receiver`), run as written with a secret of its own.
    struct PythonReceiver {
        let process: BackgroundProcess
        let port: Int
        /// The `ce-id`s it accepted, in order (it prints `ce-type ce-id` for each; its request log says the rest).
        var received: [String] {
            process.output.split(separator: "\n").filter { $0.hasPrefix("iap.") }.compactMap { $0.split(separator: " ").last.map(String.init) }
        }
    }

    static func readmeReceiver(secretFile: URL, directory: URL) async throws -> PythonReceiver {
        let interpreter = try TestServices.requirePython()
        let code = try #require(try documentedBlocks(in: TestServices.packageRoot.appendingPathComponent("docs/webhooks.md"))
            .first { $0.marker == "test: webhook receiver" }?.text, "docs/webhooks.md shows the webhook receiver")
        let script = directory.appendingPathComponent("receiver.py")
        try Data(code.utf8).write(to: script)
        try Data("python-receiver-secret".utf8).write(to: secretFile)
        let (process, port) = try await onFreshPorts(1) { ports in
            let process = try BackgroundProcess(interpreter, [script.path], environment: ["PORT": String(ports[0]), "IAP_WEBHOOK_SECRET_FILE": secretFile.path])
            try await waitUntil("the Python receiver listens", timeout: .seconds(30)) { isListening(port: ports[0]) || !process.isRunning }
            guard process.isRunning else { throw ExitedBeforeListening(process.output) }
            return (process, ports[0])
        }
        return PythonReceiver(process: process, port: port)
    }
}

import CommandLineOptions
import Foundation
import JSON
import Kafka
import PurchaseEvents
import StoreFixtures
import StoreVerification
import Synchronization

/// The worker executables as child processes, next to this `iap-harness`.
final class DemoWorkers: @unchecked Sendable {
    // @unchecked: `processes` is only touched from the demo's own task, one call at a time.
    private let directory: URL
    private let environment: [String: String]
    private let binaries = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
    /// Each running worker: its executable, which replica it is (1: the one `start` began; 2… joined later), the process.
    private var processes: [(name: String, replica: Int, process: Process)] = []
    private var replicasStarted: [String: Int] = [:]
    /// Workers whose first replica left for good (`leave`): not brought back by `killAndRestart`.
    private var firstReplicaLeft: Set<String> = []

    init(directory: URL, environment: [String: String]) throws {
        self.directory = directory
        self.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
    }

    /// The process id of the running `name` (its first replica).
    func pid(of name: String) -> Int32? {
        processes.first { $0.name == name && $0.replica == 1 && $0.process.isRunning }?.process.processIdentifier
    }

    /// Where replica `replica` of `name` writes its log (standard output and error).
    func logFile(of name: String, replica: Int = 1) -> URL {
        directory.appendingPathComponent(replica == 1 ? "\(name).log" : "\(name)-\(replica).log")
    }

    /// Where replica `replica` of `name` writes the ports it listens on (`IAP_HTTP_PORT_FILE`).
    func portFile(of name: String, replica: Int = 1) -> URL {
        directory.appendingPathComponent(replica == 1 ? "\(name).ports.json" : "\(name)-\(replica).ports.json")
    }

    /// The HTTP port of replica `replica` of `name` (or of its operations endpoints, `"operations"`), once it listens.
    func port(of name: String, replica: Int = 1, endpoints: String = "http") async throws -> Int {
        let file = portFile(of: name, replica: replica)
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            // Not written yet (it is written whole, by a rename): keep waiting.
            if let data = try? Data(contentsOf: file), let ports = JSONValue.parse(Array(data))?.objectValue {
                guard let port = ports[endpoints]?.int64Value else { throw UsageError("\(file.lastPathComponent) names no \(endpoints) port") }
                return Int(port)
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw UsageError("\(name) did not write \(file.lastPathComponent) within 60 s (its log: \(logFile(of: name, replica: replica).path))")
    }

    /// The replicas of `name` running now.
    func replicas(of name: String) -> [Int] { processes.filter { $0.name == name && $0.process.isRunning }.map(\.replica) }

    /// Starts replica 1 of `name` (again, after a kill).
    func start(_ name: String, arguments: [String] = []) throws { try start(name, replica: 1, arguments: arguments) }

    /// Starts one more replica of `name`, which joins the running ones' consumer groups; returns its number.
    func join(_ name: String) throws -> Int {
        let replica = max(2, (replicasStarted[name] ?? 1) + 1)
        try start(name, replica: replica, arguments: [])
        return replica
    }

    /// Stops replica `replica` of `name`: SIGTERM (it leaves its groups gracefully; not awaited) or SIGKILL.
    func leave(_ name: String, replica: Int, signal: Int32) {
        if replica == 1 { firstReplicaLeft.insert(name) }
        for entry in processes where entry.name == name && entry.replica == replica && entry.process.isRunning {
            kill(entry.process.processIdentifier, signal)
        }
    }

    private func start(_ name: String, replica: Int, arguments: [String]) throws {
        replicasStarted[name] = max(replicasStarted[name] ?? 0, replica)
        let executable = binaries.appendingPathComponent(name)
        guard FileManager.default.isExecutableFile(atPath: executable.path) else { throw UsageError("\(name) not found next to iap-harness (\(executable.path)); build all products") }
        let process = Process()
        // IAP_WORKER_WRAPPER (e.g. "valgrind --leak-check=full --log-file=/tmp/vg.%p"): run each worker under it.
        if let wrapper = environment["IAP_WORKER_WRAPPER"]?.split(separator: " ").map(String.init), !wrapper.isEmpty {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env") // finds the wrapper on PATH
            process.arguments = wrapper + [executable.path] + arguments
        } else {
            process.executableURL = executable
            process.arguments = arguments
        }
        // A restarted worker writes its new port; the file of the one before it goes first.
        let ports = portFile(of: name, replica: replica)
        try? FileManager.default.removeItem(at: ports) // absent at the first start
        process.environment = environment.merging(["IAP_HTTP_PORT_FILE": ports.path]) { _, file in file }
        let log = logFile(of: name, replica: replica)
        // Appended to: a restarted worker's log follows its predecessor's.
        guard FileManager.default.fileExists(atPath: log.path) || FileManager.default.createFile(atPath: log.path, contents: nil) else {
            throw UsageError("cannot create \(log.path)")
        }
        let handle = try FileHandle(forWritingTo: log)
        try handle.seekToEnd()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        processes.append((name, replica, process))
    }

    /// Kills replica 1 of a worker with SIGKILL (no shutdown, no commit, as a crash or an OOM kill would) and starts a new one;
    /// nothing once that replica left.
    func killAndRestart(_ name: String) throws {
        guard !firstReplicaLeft.contains(name) else { return }
        for (running, replica, process) in processes where running == name && replica == 1 && process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        processes.removeAll { !$0.process.isRunning }
        try start(name)
    }

    /// SIGTERM, a bounded wait for the graceful shutdown, then SIGKILL.
    func stopAll() {
        for (_, _, process) in processes where process.isRunning { process.terminate() }
        // A wrapped worker (valgrind) takes longer to stop and report.
        let deadline = Date().addingTimeInterval(environment["IAP_WORKER_WRAPPER"] == nil ? 40 : 300)
        for (_, _, process) in processes {
            while process.isRunning && Date() < deadline { usleep(50_000) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        processes.removeAll()
    }
}

/// The demo's input: signed purchases and what the apps do afterwards.
struct DemoPurchases {
    struct Purchase {
        let user: String
        let transactionId: String
        let productId: String
        let jws: String
        var amount: Int64 { productId == "coins.500" ? 500 : 100 }
    }

    let unique: [Purchase]
    let consumedCount: Int
    let firstWave: [PurchaseSubmitted]
    let restores: [PurchaseSubmitted]
    let now: Date

    static func make(plan: DemoCommand.Plan, users: Int, pki: TestPKI, now: Date) throws -> DemoPurchases {
        let signer = JWSSigner(pki: pki)
        let forger = JWSSigner(pki: try TestPKI.make(name: "forger"))
        var unique: [Purchase] = []
        for index in 0..<plan.unique {
            let stale = index >= plan.consumed
            let product = index % 3 == 0 ? "coins.500" : "coins.100"
            let id = "\(2_000_000_000_000 + index)"
            let jws = try signer.sign(AppStorePayloads.transaction(
                transactionId: id, productId: product, bundleId: DemoCommand.bundleId, environment: .sandbox,
                purchaseDate: stale ? now.addingTimeInterval(-48 * 3600) : now, appAccountToken: UUID().uuidString.lowercased()))
            unique.append(Purchase(user: "user-\(index % users + 1)", transactionId: id, productId: product, jws: jws))
        }
        func submit(_ purchase: Purchase, _ source: SubmissionSource) -> PurchaseSubmitted {
            PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: purchase.jws, userId: purchase.user,
                              submittedAt: now, source: source, submissionId: UUID().uuidString.lowercased())
        }
        var wave = unique.map { submit($0, .client) }
        wave += unique.prefix(plan.duplicates).map { submit($0, .client) }
        for index in 0..<plan.forged {
            let jws = try forger.sign(AppStorePayloads.transaction(transactionId: "\(9_000_000_000_000 + index)", productId: "coins.500",
                                                                  bundleId: DemoCommand.bundleId, environment: .sandbox))
            wave.append(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws, userId: "user-\(index % users + 1)",
                                          submittedAt: now, source: .client, submissionId: UUID().uuidString.lowercased()))
        }
        var generator = SystemRandomNumberGenerator()
        wave.shuffle(using: &generator)
        let restores = unique.prefix(plan.consumed).suffix(plan.restores).map { submit($0, .restore) }
        return DemoPurchases(unique: unique, consumedCount: plan.consumed, firstWave: wave, restores: restores, now: now)
    }

    /// Every user's coins: the sum of their purchases, each counted once, less the refund.
    func expectedHoldings(refunded: String) -> [String: DemoProductTypes.Holdings] {
        var expected: [String: DemoProductTypes.Holdings] = [:]
        for purchase in unique where purchase.transactionId != refunded {
            expected[purchase.user, default: .init()].balances["coins", default: 0] += purchase.amount
        }
        return expected
    }

    var consumptions: [PurchaseConsumed] {
        unique.prefix(consumedCount).map { PurchaseConsumed(store: .appstore, transactionId: $0.transactionId, userId: $0.user, consumedAt: now) }
    }

    /// A REFUND notification for the first consumed purchase, signed like the App Store's.
    func refundNotification(pki: TestPKI) throws -> (event: StoreNotificationReceived, transactionId: String) {
        let refunded = unique[0]
        let signer = JWSSigner(pki: pki)
        let transaction = try signer.sign(AppStorePayloads.transaction(
            transactionId: refunded.transactionId, productId: refunded.productId, bundleId: DemoCommand.bundleId, environment: .sandbox,
            purchaseDate: now, revocationDate: Date()))
        let payload = AppStorePayloads.notification(type: .refund, bundleId: DemoCommand.bundleId, appAppleId: nil, environment: .sandbox,
                                                    signedTransactionInfo: transaction)
        return (StoreNotificationReceived(signedPayload: try signer.sign(payload), receivedAt: Date()), refunded.transactionId)
    }
}

/// Counts what the pipeline answered, from its output topics.
final class DemoWatcher: Sendable {
    struct Counts: Sendable {
        var granted = 0
        var alreadyGranted = 0
        /// Transactions with any item.granted, and the distinct rejections and dead letters (by ce_id): a
        /// worker killed after its database commit re-sends the same events when the input is redelivered.
        var grantedTransactions = Set<String>()
        var rejectedIDs = Set<String>()
        var deadLetterIDs = Set<String>()
        var rejected = 0
        var rejectedByReason: [String: Int] = [:]
        var deadLettered = 0
        var refundDue = Set<String>()
        var finished = Set<String>()
    }

    private let state = CountsBox()
    private let consumer: KafkaConsumer
    private let task: Task<Void, any Error>

    init(kafka: KafkaConfiguration, codec: EventCodec) throws {
        let topics = [EventType.itemGranted, .purchaseRejected, .deadLetter, .refundDue, .transactionFinished].map(codec.topic)
        consumer = try KafkaConsumer(configuration: .init(kafka: kafka, groupID: "\(codec.topicPrefix)watcher", topics: topics))
        let state = self.state
        task = Task { [consumer] in
            try await consumer.run { message in
                guard let value = message.value, let fields = JSONValue.parse(Array(value))?.objectValue else { return }
                let type = message.header("ce_type").flatMap(EventType.init(ceType:))
                state.counts.withLock { counts in
                    switch type {
                    case .itemGranted:
                        if fields["alreadyGranted"] == .bool(true) { counts.alreadyGranted += 1 } else { counts.granted += 1 }
                        counts.grantedTransactions.insert(fields["transactionId"]?.stringValue ?? "")
                    case .purchaseRejected:
                        guard counts.rejectedIDs.insert(message.header("ce_id") ?? "").inserted else { return }
                        counts.rejected += 1
                        counts.rejectedByReason[fields["reason"]?.stringValue ?? "?", default: 0] += 1
                    case .deadLetter:
                        if counts.deadLetterIDs.insert(message.header("ce_id") ?? "").inserted { counts.deadLettered += 1 }
                    case .refundDue: counts.refundDue.insert(message.header("ce_id") ?? "")
                    case .transactionFinished: counts.finished.insert(message.header("ce_id") ?? "")
                    default: break
                    }
                }
            }
        }
    }

    var counts: Counts { state.counts.withLock { $0 } }

    func stop() { consumer.triggerGracefulShutdown() }
}

/// The counts, shared with the consumer's handler.
private final class CountsBox: Sendable {
    let counts = Mutex(DemoWatcher.Counts())
}

extension DemoWatcher.Counts {
    var refundDueEvents: Int { refundDue.count }
}

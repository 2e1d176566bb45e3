import CommandLineOptions
import Foundation
import JSON
import JSONSchema
import Kafka
import PipelineHarness
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import StoreFixtures
import StoreVerification
import WorkerRuntime

/// `iap-harness bench reconcile`: one reconciliation pass over a stand-in App Store's notification history of
/// `--notifications` notifications, `--seen-share` of them already handled (a pass in steady state reads mostly what
/// arrived), unthrottled: its time and this process's CPU (the stand-in answering in the same process included), per page
/// of 20; and, from them, what the defaults (a pass every 15 minutes, an hour of overlap, 4 calls a second) cost at
/// 1,000,000 notifications a day, beside Apple's limit for Get Notification History (50 requests a second per app).
enum BenchReconcileCommand {
    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--notifications", "--seen-share", "--store", "--brokers", "--kafka"], flags: ["--json"])
        let count = try options.int("--notifications") ?? 20_000
        let seenShare = options.string("--seen-share").flatMap(Double.init) ?? 0.9
        guard count >= 20, (0...1).contains(seenShare) else { throw UsageError("--notifications must be at least 20 and --seen-share within 0…1") }
        let kafka = try options.kafkaConfiguration()
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("iap-bench-reconcile-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let store = try SQLPurchaseStore(url: options.string("--store") ?? "sqlite:" + work.appendingPathComponent("purchases.sqlite").path)
        try await store.migrate()
        let prefix = "bench-reconcile-\(UUID().uuidString.prefix(6).lowercased())."
        let codec = EventCodec(schemas: try JSONSchemaRegistry.eventSchemas(), source: "/iap-pipeline/bench", topicPrefix: prefix)
        try await KafkaAdmin(kafka: kafka).createTopics([codec.topic(.storeNotification)], partitions: 1)

        // The history: REFUND notifications sent over the last hour, each with its own id; the handled share recorded as such.
        let signer = JWSSigner(pki: try TestPKI.make(name: "bench reconcile"))
        let appStore = try StandInAppStore()
        let now = Date()
        let transaction = try signer.sign(AppStorePayloads.transaction(transactionId: "1", productId: "coins.100", bundleId: StandInAppStore.bundleId))
        let handled = Int(Double(count) * seenShare)
        try await store.batch {
            for index in 0..<count {
                let uuid = UUID().uuidString.lowercased()
                let sent = now.addingTimeInterval(-3600 + 3500 * Double(index) / Double(count))
                appStore.api.recordNotification(try signer.sign(AppStorePayloads.notification(
                    type: .refund, uuid: uuid, bundleId: StandInAppStore.bundleId, appAppleId: nil, signedTransactionInfo: transaction, signedDate: sent)), at: sent)
                if index < handled { try await store.recordNotificationSeen(NotificationID(uuid), type: "REFUND", at: now) }
            }
        }
        let api = AppStoreServerAPIClient(configuration: .init(baseURL: appStore.api.baseURL, keyId: StandInAppStore.keyId, issuerId: appStore.issuerId,
                                                               bundleId: BundleID(StandInAppStore.bundleId), privateKey: appStore.key))
        let reconciler = StoreReconciler(configuration: .init(callsPerSecond: 10_000), histories: [AppStoreNotificationHistory(environment: .sandbox, api: api)], store: store,
                                            producer: try KafkaProducer(configuration: .init(kafka: kafka)),
                                            context: StageContext(codec: codec, logger: Logger(stage: "reconciler", minimum: .warning)), clock: ContinuousClock())

        let (cpuBefore, started) = (ProcessAccounting.cpuSeconds(getpid()) ?? 0, ContinuousClock.now)
        guard let pass = try await reconciler.reconcileOnce()["Sandbox"] else { throw UsageError("no pass over the sandbox's history") }
        let elapsed = ContinuousClock.now - started
        let cpu = (ProcessAccounting.cpuSeconds(getpid()) ?? 0) - cpuBefore
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        guard pass.completed, pass.listed == count, pass.recovered == count - handled else {
            throw UsageError("the pass read \(pass.listed) of \(count) and published \(pass.recovered) of \(count - handled)")
        }

        // The defaults at 1,000,000 notifications a day: each pass reads the span since the last (15 min) and the overlap (1 h).
        let defaults = StoreReconciler<ContinuousClock>.Configuration()
        let perDay = 1_000_000.0
        let perPass = perDay / 86_400 * (Double(defaults.interval.components.seconds) + defaults.overlap)
        let pagesPerPass = (perPass / 20).rounded(.up)
        let passesPerHour = 3600 / Double(defaults.interval.components.seconds)
        let result: [String: JSONValue] = [
            "notifications": .integer(Int64(count)), "handledBefore": .integer(Int64(handled)), "pages": .integer(Int64(pass.pages)),
            "published": .integer(Int64(pass.recovered)), "seconds": .number(thousandths(seconds)), "cpuSeconds": .number(thousandths(cpu)),
            "millisecondsPerPage": .number(thousandths(seconds * 1000 / Double(pass.pages))), "cpuMillisecondsPerPage": .number(thousandths(cpu * 1000 / Double(pass.pages))),
            "at1MillionADay": .object([
                "notificationsPerPass": .integer(Int64(perPass)), "callsPerPass": .integer(Int64(pagesPerPass)),
                "callsPerHour": .integer(Int64(pagesPerPass * passesPerHour)), "appleLimitPerHour": .integer(50 * 3600),
                "passSecondsAtDefaultRate": .number(thousandths(pagesPerPass / defaults.callsPerSecond)),
                "cpuSecondsPerPass": .number(thousandths(cpu / Double(pass.pages) * pagesPerPass)),
            ]),
        ]
        if options.flags.contains("--json") {
            print(JSONValue.object(result).serializedText)
        } else {
            print(String(format: "one pass over %d notifications (%d handled before): %d pages, %d published, %.2f s, %.2f s CPU (%.1f ms, %.1f ms CPU a page)",
                         count, handled, pass.pages, pass.recovered, seconds, cpu, seconds * 1000 / Double(pass.pages), cpu * 1000 / Double(pass.pages)))
            print(String(format: "at 1,000,000 notifications a day with the defaults: %.0f calls a pass, %.0f an hour (Apple allows %d), a pass %.0f s at 4 calls/s, %.1f s CPU",
                         pagesPerPass, pagesPerPass * passesPerHour, 50 * 3600, pagesPerPass / defaults.callsPerSecond, cpu / Double(pass.pages) * pagesPerPass))
        }
        return 0
    }
}

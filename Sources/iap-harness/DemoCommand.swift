import CommandLineOptions
import Crypto
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

/// `iap-harness demo`: the whole pipeline as four worker processes and the ingest on a broker and a store. The first
/// act feeds signed coin purchases (duplicates, restores, forgeries, a malformed message, a refund, purchases left
/// unconsumed past their deadline); the second plays one story per product type and event order
/// (`DemoProductTypes`); the third the webhook down (`DemoWebhookDown`); the fourth a game on Google Play alone and a
/// second game (`DemoOtherApps`); the fifth web purchases through Stripe (`DemoWebPurchases`). Then the books: every valid unique purchase granted exactly once, only unconsumed
/// consumables flagged, everything else accounted for, and every user's holdings read back through
/// `GET /v1/users/{userId}` as the plan says. Exit 0 only when they balance.
enum DemoCommand {
    static let bundleId = StandInAppStore.bundleId

    struct Plan {
        let total: Int
        var duplicates: Int { max(1, total / 20) }
        var restores: Int { max(1, total / 50) }
        var forged: Int { max(1, total / 50) }
        let malformed = 1
        var stale: Int { max(1, total / 100) }
        var unique: Int { total - duplicates - restores - forged - malformed }
        var consumed: Int { unique - stale }
    }

    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--brokers", "--store", "--purchases", "--users", "--kafka"], flags: ["--json", "--kill-workers"])
        let killWorkers = options.flags.contains("--kill-workers")
        let plan = Plan(total: try options.int("--purchases") ?? 1000)
        let users = try options.int("--users") ?? 100
        guard plan.total >= 200, users >= 1 else { throw UsageError("--purchases must be at least 200 and --users at least 1") }
        let json = options.flags.contains("--json")
        let kafka = try options.kafkaConfiguration()
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("iap-demo-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        let storeURL = options.string("--store") ?? "sqlite:" + work.appendingPathComponent("purchases.sqlite").path
        let prefix = "demo-\(UUID().uuidString.prefix(6).lowercased())."
        let say: (String) -> Void = { line in if !json { print(line) } else { FileHandle.standardError.write(Data((line + "\n").utf8)) } }

        say("iap-pipeline demo: \(plan.total) submissions for \(users) users; store \(storeURL.hasPrefix("sqlite:") ? "SQLite" : "PostgreSQL"), topics \(prefix)*")
        let schemas = try JSONSchemaRegistry.eventSchemas()
        let codec = EventCodec(schemas: schemas, source: "/iap-pipeline/demo", topicPrefix: prefix)
        try await KafkaAdmin(kafka: kafka).createTopics(codec.pipelineTopics, partitions: 4)
        let store = try SQLPurchaseStore(url: storeURL)
        try await store.migrate()

        // A test PKI in Apple's shape, and the sample catalog.
        let pki = try TestPKI.make(name: "iap-pipeline demo")
        let root = work.appendingPathComponent("root.pem")
        try Data(pki.root.pemRepresentation.utf8).write(to: root)
        let catalog = work.appendingPathComponent("catalog.json")
        try Data(Self.catalog.utf8).write(to: catalog)
        let started = Date()
        let types = try DemoProductTypes(pki: pki, now: started)
        let appCoins = try AppCoinsAPIStandIn(purchases: types.appCoinsPurchases)
        let appCoinsKey = work.appendingPathComponent("appcoins-key.txt")
        try Data(try types.appCoinsSigner.publicKeyBase64().utf8).write(to: appCoinsKey)
        let readSecret = Data(UUID().uuidString.utf8)
        let readSecretFile = work.appendingPathComponent("read-secret")
        try readSecret.write(to: readSecretFile)

        // The App Store Server API of the third act (its history, a sync), which the ingest's read side asks too.
        let appStore = try StandInAppStore()
        let apiKey = work.appendingPathComponent("api-key.p8")
        try Data(try appStore.key.pemRepresentation().utf8).write(to: apiKey)
        // The fourth act's Google Play, and the deployment's three apps: the demo's game on the App Store, AppCoins and the web,
        // a game sold on Google Play alone, and a second App Store game.
        let otherApps = try DemoOtherApps(pki: pki, now: started)
        let googlePlay = try otherApps.settings(in: work)
        // The fifth act's Stripe: the demo's game sells on the web too.
        let web = try DemoWebPurchases(now: started)
        let apps = work.appendingPathComponent("apps.json")
        try Data(Self.apps(catalog: catalog, appCoinsKey: appCoinsKey, googlePlayKey: googlePlay.licensingKey).utf8).write(to: apps)

        let workers = try WorkerProcesses(directory: work, environment: [
            "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrapServers ?? "", "IAP_STORE_URL": storeURL, "IAP_TOPIC_PREFIX": prefix,
            "IAP_GROUP_PREFIX": prefix, "IAP_APPS_FILE": apps.path, "IAP_ENVIRONMENT": "Sandbox", "IAP_ROOT_CERTIFICATES": root.path,
            "IAP_RECEIPT_ROOT_CERTIFICATES": root.path, // the demo's receipts chain to the same test root
            "IAP_LOG_LEVEL": "warning", "IAP_SCHEMAS_DIR": schemas.directory ?? "",
            "IAP_SWEEP_INTERVAL": "1", "IAP_CLAW_BACK_DUE_REFUNDS": "false", "IAP_APPCOINS_URL": appCoins.baseURL.absoluteString,
            // A killed worker's partitions move to its replacement once the group stops hearing from it.
            "KAFKA_SESSION_TIMEOUT_MS": "6000", "KAFKA_HEARTBEAT_INTERVAL_MS": "1000",
        ].merging(googlePlay.environment) { _, new in new }.merging(try web.settings(in: work)) { _, new in new })
        defer { workers.stopAll() }
        for name in ["iap-verifier", "iap-granter", "iap-finisher"] { try workers.start(name) }
        // The read side, as apps' backends ask it.
        try workers.start("iap-ingest", arguments: ["--http-port", "0", "--http-host", "127.0.0.1", "--log-level", "info", "--read-side",
                                                    "--read-secret-file", readSecretFile.path, "--appstore-api-url", appStore.api.baseURL.absoluteString,
                                                    "--appstore-key-id", StandInAppStore.keyId, "--appstore-issuer-id", appStore.issuerId,
                                                    "--appstore-private-key", apiKey.path])

        let purchases = try DemoPurchases.make(plan: plan, users: users, pki: pki, codec: codec, now: started)
        let producer = try KafkaProducer(configuration: .init(kafka: kafka))
        let watcher = try PipelineWatcher(kafka: kafka, codec: codec, groupID: "\(prefix)watcher")

        // Wave 1: every submission, duplicates and forgeries and the malformed one among them.
        let wave = purchases.input.messages
        for result in await producer.send(contentsOf: wave) { _ = try result.get() }
        say("submitted \(wave.count) messages")
        var kills = 0
        if killWorkers {
            try await PipelineHarness.waitFor(say, "a third granted", timeout: 300) {
                let granted = try await store.statistics().purchasesByState[.granted] ?? 0
                return granted >= plan.unique / 3 ? nil : "granted \(granted)/\(plan.unique / 3)"
            }
            for name in ["iap-verifier", "iap-granter", "iap-finisher"] {
                try workers.killAndRestart(name)
                kills += 1
            }
            say("killed (SIGKILL) and restarted iap-verifier, iap-granter, iap-finisher mid-stream")
        }
        try await PipelineHarness.waitFor(say, "all unique purchases granted", timeout: 300) {
            let statistics = try await store.statistics()
            return (statistics.purchasesByState[.granted] ?? 0) == plan.unique ? nil : "granted \(statistics.purchasesByState[.granted] ?? 0)/\(plan.unique)"
        }
        // The apps consume what they received, except the purchases left unconsumed; then a refund and the restores.
        for result in await producer.send(contentsOf: try purchases.consumptions.map { try codec.message($0, time: Date()) }) { _ = try result.get() }
        try await PipelineHarness.waitFor(say, "consumed purchases finished", timeout: 300) {
            let finished = try await store.statistics().purchasesByState[.finished] ?? 0
            return finished == plan.consumed ? nil : "finished \(finished)/\(plan.consumed)"
        }
        let refund = try purchases.refundNotification(pki: pki)
        let third = try [codec.message(refund.event, time: Date())] + purchases.restores.map { try codec.message($0, time: Date()) }
        for result in await producer.send(contentsOf: third) { _ = try result.get() }
        try workers.start("iap-sweeper")
        try await PipelineHarness.waitFor(say, "refund revoked, stale purchases flagged, restores answered", timeout: 300) {
            let statistics = try await store.statistics()
            let revoked = statistics.purchasesByState[.revoked] ?? 0
            let due = statistics.purchasesByState[.refundDue] ?? 0
            let seen = watcher.seen
            guard revoked == 1, due == plan.stale, seen.alreadyGrantedAnswers >= plan.duplicates + plan.restores,
                  seen.rejectionCount >= plan.forged, seen.deadLetterEvents.count >= plan.malformed, seen.refundDue.count >= plan.stale
            else { return "revoked \(revoked)/1, refund due \(due)/\(plan.stale), already granted \(seen.alreadyGrantedAnswers)/\(plan.duplicates + plan.restores)" }
            return nil
        }
        // The first act's books, before the second act adds to the store and the topics.
        let elapsed = Date().timeIntervalSince(started)
        var books = try await PipelineBooks.check(input: purchases.input, expectations: .init(revoked: [refund.transactionId], laterRepeats: plan.restores,
                                                                                             exactAnswers: kills == 0),
                                                  seen: watcher.seen, store: store)

        // The second act: what was bought decides what happens, in any order.
        try await types.play(store: store, send: { events in
            for result in await producer.send(contentsOf: try events.map { try codec.message($0, time: Date()) }) { _ = try result.get() }
        }, say: say)
        let secondAct = Date().timeIntervalSince(started) - elapsed

        // The third act: the webhook was down, and the store's history is read back.
        let api = AppStoreServerAPIClient(configuration: .init(baseURL: appStore.api.baseURL, keyId: StandInAppStore.keyId, issuerId: appStore.issuerId,
                                                               bundleId: BundleID(bundleId), privateKey: appStore.key))
        let reconciler = StoreReconciler(configuration: .init(callsPerSecond: 50), histories: [AppStoreNotificationHistory(environment: .sandbox, api: api)], store: store,
                                            producer: try KafkaProducer(configuration: .init(kafka: kafka)),
                                            context: StageContext(codec: codec, logger: Logger(stage: "reconciler", minimum: .warning)), clock: ContinuousClock())
        let webhookDown = DemoWebhookDown(appStore: types.appStore)
        let lost = try webhookDown.lostNotifications().count
        let ingest = "http://127.0.0.1:\(try await workers.port(of: "iap-ingest"))"
        let passes = try await webhookDown.play(store: store, reconciler: reconciler, history: appStore.api, send: { events in
            for result in await producer.send(contentsOf: try events.map { try codec.message($0, time: Date()) }) { _ = try result.get() }
        }, say: say)
        let restored = try await webhookDown.restore(store: store, history: appStore.api, ingest: ingest, secret: readSecret, send: { events in
            for result in await producer.send(contentsOf: try events.map { try codec.message($0, time: Date()) }) { _ = try result.get() }
        }, say: say)
        books.violations += restored.violations
        // The fourth act: the game on Android, and a second game.
        books.violations += try await otherApps.play(store: store, ingest: ingest, send: { events in
            for result in await producer.send(contentsOf: try events.map { try codec.message($0, time: Date()) }) { _ = try result.get() }
        }, say: say)
        // The fifth act: web purchases through Stripe Checkout, a lost refund webhook reconciled, a dispute by webhook.
        let webPurchases = try await web.play(store: store, reconciler: try web.reconciler(store: store, kafka: kafka, codec: codec), ingest: ingest, send: { events in
            for result in await producer.send(contentsOf: try events.map { try codec.message($0, time: Date()) }) { _ = try result.get() }
        }, say: say)
        books.violations += webPurchases.violations
        let expected = purchases.expectedHoldings(refunded: refund.transactionId).merging(types.expected) { _, story in story }
            .merging(webhookDown.expected) { _, story in story }.merging(otherApps.expected) { _, story in story }.merging(web.expected) { _, story in story }
        books.violations += try await DemoProductTypes.holdingsViolations(expected, ingest: ingest, secret: readSecret)
        if passes.first?.recovered != lost { books.violations.append("the first pass over the store's history published \(passes.first?.recovered ?? 0) of \(lost) lost notifications") }
        if passes.second?.recovered != 0 { books.violations.append("a second pass published \(passes.second?.recovered ?? -1) notifications again") }
        let audit = try await store.audit()
        let flagged = Set(audit.purchases.filter { $0.value.state == .refundDue }.keys.map(\.transactionId))
        let stale = Set(purchases.unique.suffix(plan.stale).map(\.transactionId))
        if flagged != stale || audit.purchases.values.contains(where: { $0.state == .refundDue && $0.productType != .consumable }) {
            books.violations.append("flagged \(flagged.sorted()), expected only the unconsumed consumables \(stale.sorted())")
        }
        workers.stopAll()
        await producer.shutdown()
        await watcher.stop()

        var summary = books.demoSummary(plan: plan, seconds: elapsed, kills: kills)
        if case .object(var fields) = summary {
            fields["productTypes"] = DemoProductTypes.countsByType(audit)
            fields["holdingsReadBack"] = .integer(Int64(expected.count))
            fields["purchasesByAppAndStore"] = DemoOtherApps.countsByAppAndStore(audit)
            fields["stories"] = .array(types.expected.keys.sorted().map { .string($0.rawValue) })
            fields["secondActSeconds"] = .number((secondAct * 10).rounded() / 10)
            fields["webhookDown"] = .object(["lost": .integer(Int64(lost)), "recovered": .integer(Int64(passes.first?.recovered ?? 0)),
                                             "secondPassRecovered": .integer(Int64(passes.second?.recovered ?? -1)),
                                             "stories": .array(webhookDown.expected.keys.sorted().map { .string($0.rawValue) })])
            fields["webPurchases"] = .object(["recovered": .integer(Int64(webPurchases.first?.recovered ?? 0)),
                                              "secondPassRecovered": .integer(Int64(webPurchases.second?.recovered ?? -1))])
            summary = .object(fields)
        }
        if json {
            print(summary.serializedText)
        } else {
            print(books.demoTable(plan: plan, seconds: elapsed))
            print("\n  second act (\((secondAct * 10).rounded() / 10) s): " + types.expected.keys.sorted().map(\.rawValue).joined(separator: ", "))
            for (type, states) in audit.purchases.values.reduce(into: [String: [String: Int]](), { $0[$1.productType.rawValue, default: [:]][$1.state.rawValue, default: 0] += 1 })
                .sorted(by: { $0.key < $1.key }) {
                print("  \(type.padding(toLength: 40, withPad: " ", startingAt: 0)) " + states.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
            }
            print("  third act, the webhook was down: \(lost) notifications lost; a pass over the store's history published "
                  + "\(passes.first?.recovered ?? 0), a second pass \(passes.second?.recovered ?? -1): " + webhookDown.expected.keys.sorted().map(\.rawValue).joined(separator: ", "))
            print("  fourth act: an Android-only game's player on Google Play (a pass renewed by a pushed notification) and a second game")
            print("  fifth act, web purchases through Stripe Checkout: a refund whose webhook was lost, taken back by a pass over Stripe's events "
                  + "(published \(webPurchases.first?.recovered ?? 0), a second pass \(webPurchases.second?.recovered ?? -1)); a dispute by signed webhook")
            print("  purchases by app and store: \(DemoOtherApps.countsByAppAndStore(audit).serializedText)")
            print("  holdings read back by GET /v1/users/{id}: \(expected.count) users")
        }
        return books.violations.isEmpty ? 0 : 1
    }

    /// The demo's catalog: coin packs, ad-free and a monthly pass on the App Store; coins on AppCoins; coins and the pass
    /// on Google Play; coins and ad-free on the web, by Stripe price id.
    static let catalog = #"""
        {"appstore":{"coins.100":{"type":"consumable","currency":"coins","amount":100},"coins.500":{"type":"consumable","currency":"coins","amount":500},
        "adfree":{"type":"nonConsumable","entitlement":"adfree"},"pass.monthly":{"type":"autoRenewable","entitlement":"pass"}},
        "appcoins":{"coins.100":{"type":"consumable","currency":"coins","amount":100}},
        "googleplay":{"coins.100":{"type":"consumable","currency":"coins","amount":100},"pass.monthly":{"type":"autoRenewable","entitlement":"pass"}},
        "stripe":{"price_coins100":{"type":"consumable","currency":"coins","amount":100},"price_adfree":{"type":"nonConsumable","entitlement":"adfree"}}}
        """#

    /// The demo's apps file: its game on the App Store, AppCoins and the web (Stripe) with `catalog`; a game on Google Play
    /// alone with the same catalog; a second game on the App Store with its own catalog.
    static func apps(catalog: URL, appCoinsKey: URL, googlePlayKey: URL) -> String {
        JSONValue.object(["apps": .array([
            .object(["id": .string("coins-game"), "appstore": .object(["bundleId": .string(bundleId)]),
                     "appcoins": .object(["package": .string(DemoProductTypes.packageName), "publicKeyFile": .string(appCoinsKey.path)]),
                     "stripe": .object([:]), "catalog": .string(catalog.path)]),
            // A game sold on Google Play alone: nothing of the App Store's is configured for it.
            .object(["id": .string(DemoOtherApps.androidApp), "googleplay": .object(["package": .string(DemoOtherApps.package), "publicKeyFile": .string(googlePlayKey.path)]),
                     "catalog": .string(catalog.path)]),
            .object(["id": .string("puzzle"), "appstore": .object(["bundleId": .string(DemoOtherApps.puzzleBundle)]),
                     "catalog": .object(["appstore": .object(["puzzle.hints10": .object(["type": .string("consumable"), "currency": .string("puzzle.hints"),
                                                                                          "amount": .integer(10)])])])]),
        ])]).serializedText
    }
}

import Crypto
import Database
import Foundation
import PurchaseDomain
import JSON
import JSONSchema
import Kafka
import PipelineHarness
import PurchaseEvents
import PurchaseStore
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Testing
import TestSupport
import WorkerApp
import WorkerRuntime

/// The workers' stages, assembled as the executables assemble them, together in this process on a real broker and a
/// real store: verifier → granter → finisher, with a stand-in App Store Server API that checks the finisher's token.
@Suite(TestServices.broker, .timeLimit(.minutes(5)))
struct PipelineTests {
    static let schemas = StageFixtures.schemas
    static let bundle = StageFixtures.bundle
    static let bundleID = StageFixtures.bundleID

    /// The running stages. Used from the test's task only.
    final class Pipeline: @unchecked Sendable {
        let codec: EventCodec
        let store: SQLPurchaseStore
        var runners: [StageRunner]
        var tasks: [Task<Void, any Error>]
        /// The stand-in App Store Server API the finisher calls.
        let appStore: AppStoreServerAPIStandIn
        /// The key of the AppCoins app `com.example.coins` the verifier knows.
        let appCoins: AppCoinsSigner
        /// The licensing key of the Google Play app `com.example.coins` the verifier knows.
        let googlePlay: GooglePlaySigner
        let makeRunner: (Int) async throws -> StageRunner
        /// The workers' environment variables, for assembling another worker (the sweeper) as they were assembled.
        let variables: [String: String]

        init(codec: EventCodec, store: SQLPurchaseStore, appStore: AppStoreServerAPIStandIn, appCoins: AppCoinsSigner, googlePlay: GooglePlaySigner,
             variables: [String: String], makeRunner: @escaping (Int) async throws -> StageRunner) async throws {
            self.googlePlay = googlePlay
            self.variables = variables
            self.codec = codec
            self.store = store
            self.appStore = appStore
            self.appCoins = appCoins
            self.makeRunner = makeRunner
            var runners: [StageRunner] = []
            for index in 0..<3 { runners.append(try await makeRunner(index)) }
            self.runners = runners
            tasks = runners.map { runner in Task { try await runner.run() } }
        }

        /// Stops stage `index` gracefully and starts a new process-equivalent in its place (same group).
        func restart(_ index: Int) async throws {
            runners[index].triggerGracefulShutdown()
            try await tasks[index].value
            runners[index] = try await makeRunner(index)
            let runner = runners[index]
            tasks[index] = Task { try await runner.run() }
        }

        /// A submission of an AppCoins purchase of `com.example.coins`, signed with `signer` (the app's key by default).
        func appCoinsSubmission(token: String, sku: String = "coins.100", user: UserID, package: String = "com.example.coins",
                                signer: AppCoinsSigner? = nil) throws -> KafkaProducerMessage {
            let signed = try (signer ?? appCoins).sign(packageName: package, sku: sku, purchaseToken: token, orderId: "order-\(token)")
            return try codec.message(PurchaseSubmitted(store: .appcoins, kind: .appcoinsPurchase,
                                                       appcoins: .init(packageName: PackageName(package), sku: ProductID(sku), purchaseToken: PurchaseToken(token), purchaseData: signed.purchaseData,
                                                                       signature: signed.signature),
                                                       userId: user, submittedAt: Date(), source: .server), time: Date())
        }

        func stop() async throws {
            runners.forEach { $0.triggerGracefulShutdown() }
            for task in tasks { try await task.value }
        }
    }

    /// - Parameter finishWithAppStoreAPI: false for a finisher without App Store API credentials (consumables then wait
    ///   for the app's consumption report).
    /// - Parameter catalog: the products' catalog (JSON); nil for `schemas/examples/catalog.json`.
    /// - Parameter googlePlay: the stand-in Android Publisher API the verifier and finisher call, with its service account.
    /// - Parameter stripe: the stand-in Stripe API the verifier reads Checkout Sessions from (the catalog's `stripe` prices).
    /// - Parameter sellsOnTheAppStore: false for a deployment that sells nowhere on the App Store: no App Store setting at all.
    static func start(servers: String, pki: TestPKI, storeURL: String, appCoinsURL: URL? = nil, googlePlay: GooglePlayAPIStandIn? = nil,
                      stripe: StripeAPIStandIn? = nil, sellsOnTheAppStore: Bool = true, finishWithAppStoreAPI: Bool = true,
                      restorePolicy: RestorePolicy = .transfer, pendingRecheck: Duration = .seconds(60), catalog: String? = nil) async throws -> Pipeline {
        let prefix = "p\(UUID().uuidString.prefix(6).lowercased())."
        let admin = try KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers]))
        try await admin.createTopics(EventCodec.pipelineTopics(prefix: prefix), partitions: 4)
        let store = try SQLPurchaseStore(url: storeURL)
        try await store.migrate()
        // The workers' own assembly (`Workers`, `WorkerApp.Environment.runner`) from their settings, as the executables
        // read them: the same stages, consumers and Kafka properties.
        let files = FileManager.default.temporaryDirectory.appendingPathComponent("pipeline-\(prefix)")
        try FileManager.default.createDirectory(at: files, withIntermediateDirectories: true)
        func file(_ name: String, _ text: String) throws -> String {
            try Data(text.utf8).write(to: files.appendingPathComponent(name))
            return files.appendingPathComponent(name).path
        }
        let apiKey = try PrivateKey.generateP256()
        let appStore = try AppStoreServerAPIStandIn(publicKey: try apiKey.publicKey(), keyId: "K", issuerId: "I", bundleId: bundle)
        let appCoinsSigner = try AppCoinsSigner()
        let googlePlaySigner = try GooglePlaySigner()
        var variables = [
            "KAFKA_BOOTSTRAP_SERVERS": servers, "KAFKA_TOPIC_METADATA_REFRESH_INTERVAL_MS": "1000", // topics grown mid-test are seen at once
            "IAP_TOPIC_PREFIX": prefix, "IAP_GROUP_PREFIX": prefix, "IAP_LOG_LEVEL": "error",
            "IAP_SCHEMAS_DIR": TestServices.packageRoot.appendingPathComponent("schemas").path,
            "IAP_BUNDLE_ID": bundle, "IAP_ENVIRONMENT": "Sandbox", "IAP_ROOT_CERTIFICATES": try file("root.pem", pki.root.pemRepresentation),
            "IAP_CATALOG": try catalog.map { try file("catalog.json", $0) }
                ?? TestServices.packageRoot.appendingPathComponent("schemas/examples/catalog.json").path,
            "IAP_RESTORE_POLICY": restorePolicy.rawValue, "IAP_PENDING_RECHECK": String(pendingRecheck.components.seconds),
            "IAP_CLAW_BACK_DUE_REFUNDS": "true",
        ]
        if let appCoinsURL {
            variables["IAP_APPCOINS_URL"] = appCoinsURL.absoluteString
            variables["IAP_APPCOINS_APPS"] = "com.example.coins=" + (try file("appcoins.pub", try appCoinsSigner.publicKeyBase64()))
        }
        if let googlePlay {
            variables["IAP_GOOGLEPLAY_API_URL"] = googlePlay.baseURL.absoluteString
            variables["IAP_GOOGLEPLAY_SERVICE_ACCOUNT_FILE"] = try file("service-account.json", googlePlay.serviceAccountKeyJSON())
            variables["IAP_GOOGLEPLAY_APPS"] = "com.example.coins=" + (try file("googleplay.pub", try googlePlaySigner.publicKeyBase64()))
        }
        if let stripe {
            variables["IAP_STRIPE_API_URL"] = stripe.baseURL.absoluteString
            variables["IAP_STRIPE_SECRET_KEY_FILE"] = try file("stripe.key", stripe.secretKey + "\n")
        }
        if !sellsOnTheAppStore {
            for name in ["IAP_BUNDLE_ID", "IAP_ENVIRONMENT", "IAP_ROOT_CERTIFICATES"] { variables[name] = nil }
        }
        if finishWithAppStoreAPI && sellsOnTheAppStore {
            variables.merge(["IAP_APPSTORE_API_URL": appStore.baseURL.absoluteString, "IAP_APPSTORE_KEY_ID": "K", "IAP_APPSTORE_ISSUER_ID": "I",
                             "IAP_APPSTORE_PRIVATE_KEY_FILE": try file("api.p8", try apiKey.pemRepresentation())]) { _, new in new }
        }
        let workers: [(command: String, settings: [Setting], stage: @Sendable (WorkerApp.Environment) async throws -> any MessageStage)] = [
            ("iap-verifier", Workers.verifierSettings, { try Workers.verifierStage($0) }),
            ("iap-granter", Workers.granterSettings, { try await Workers.granterStage($0) }),
            ("iap-finisher", Workers.finisherSettings, { try Workers.finisherStage($0) }),
        ]
        let makeRunner: (Int) async throws -> StageRunner = { [variables] index in
            let worker = workers[index]
            let environment = try WorkerApp.embedded(command: worker.command, settings: worker.settings, arguments: ["--kafka", "log_level=3"],
                                                     variables: variables, store: store)
            return try environment.runner(for: try await worker.stage(environment))
        }
        return try await Pipeline(codec: EventCodec(schemas: schemas, source: "/test/producer", topicPrefix: prefix), store: store, appStore: appStore,
                            appCoins: appCoinsSigner, googlePlay: googlePlaySigner, variables: variables, makeRunner: makeRunner)
    }

    @Test(arguments: StoreEngine.available)
    func purchasesAreVerifiedGrantedAndFinishedOnceAndBadInputIsAccountedFor(_ engine: StoreEngine) async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await engine.freshURL())
        let signer = JWSSigner(pki: pki)
        let forger = JWSSigner(pki: try TestPKI.make(name: "forger"))
        let now = Date()

        var submissions: [KafkaProducerMessage] = []
        var signed: [(user: UserID, jws: String)] = []
        for index in 0..<24 {
            let user: UserID = "user-\(index % 6)"
            let jws = try signer.sign(AppStorePayloads.transaction(transactionId: "\(3_000_000 + index)", productId: index % 4 == 0 ? "coins.1000" : "coins.100",
                                                                   bundleId: Self.bundle, purchaseDate: now))
            signed.append((user, jws))
            submissions.append(try pipeline.codec.message(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws,
                                                                            userId: user, submittedAt: now, source: .client), time: now))
        }
        // Duplicates (a client retrying, a restore).
        for (user, jws) in signed.prefix(4) {
            submissions.append(try pipeline.codec.message(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws,
                                                                            userId: user, submittedAt: now, source: .restore), time: now))
        }
        // Forged, and a product the catalog does not know.
        for (index, productId) in [(0, "coins.100"), (1, "coins.100"), (2, "no.such.product")] {
            let jws = index < 2 ? try forger.sign(AppStorePayloads.transaction(transactionId: "\(4_000_000 + index)", productId: productId, bundleId: Self.bundle))
                                : try signer.sign(AppStorePayloads.transaction(transactionId: "\(4_000_000 + index)", productId: productId, bundleId: Self.bundle))
            submissions.append(try pipeline.codec.message(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws,
                                                                            userId: "user-9", submittedAt: now, source: .client), time: now))
        }
        // Malformed: not JSON.
        var malformed = submissions[0]
        malformed.value = Data("{not json".utf8)
        submissions.append(malformed)

        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        for result in await producer.send(contentsOf: submissions) { _ = try result.get() }

        try await waitUntil("24 purchases finished", timeout: .seconds(120)) {
            try await pipeline.store.statistics().purchasesByState[.finished] == 24
        }
        // A replay of someone else's purchase, once it is theirs (users' submissions travel on different partitions:
        // sent together, either could be verified first).
        // Every submission answered first (all but the malformed one, a dead letter): the forged ones travel on a partition of
        // their own, and may still be on their way once the others finished, which would move the count past the replay's.
        let handled = submissions.count - 1
        try await waitUntil("every submission is answered") { pipeline.runners[0].counters.withLock { $0["handled"] ?? 0 } == handled }
        let replay = try pipeline.codec.message(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: signed[5].jws,
                                                                  userId: "thief", submittedAt: now, source: .client), time: now)
        for result in await producer.send(contentsOf: [replay]) { _ = try result.get() }
        try await waitUntil("the replay is answered") { pipeline.runners[0].counters.withLock { $0["handled"] ?? 0 } == handled + 1 }
        let counters = pipeline.runners.map { runner in runner.counters.withLock { $0 } }
        try await waitUntil("the dead letter is published") { pipeline.runners[0].counters.withLock { $0["deadLettered"] } == 1 }
        try await pipeline.stop()

        // Each user: 100 coins per coins.100 purchase, 1000 per coins.1000, granted once despite duplicates.
        for user in 0..<6 {
            let purchases = (0..<24).filter { $0 % 6 == user }
            let expected = purchases.reduce(Int64(0)) { $0 + ($1 % 4 == 0 ? 1000 : 100) }
            #expect(try await pipeline.store.balances(of: "user-\(user)") == ["coins": expected], "user-\(user)")
        }
        #expect(try await pipeline.store.balances(of: "thief").isEmpty, "a replay under another user grants nothing")
        #expect(try await pipeline.store.balances(of: "user-9").isEmpty, "forged and unknown products grant nothing")
        let statistics = try await pipeline.store.statistics()
        #expect(statistics.purchasesByState == [.finished: 24, .verified: 1], "the unknown product stays verified for the sweeper: \(statistics)")
        #expect(pipeline.appStore.finished.sorted() == (0..<24).map { "\(3_000_000 + $0)" }.sorted(), "Finish Transaction once per purchase")
        #expect(counters.allSatisfy { ($0["retries"] ?? 0) == 0 }, "\(counters)")
    }
}

extension PipelineTests {
    /// The harness's input and books (as the demo, the benchmark and the chaos run use them) on the stages in this
    /// process: App Store coins and ad-free, AppCoins coins, Google Play coins and ad-free, and four subscriptions each renewed and then upgraded (the
    /// upgrade ending the renewal early, and saying so), with repeats, forgeries and malformed messages among 132
    /// purchases, the granter and the verifier restarted while they flow.
    @Test(arguments: StoreEngine.available)
    func stagesRestartedMidStreamLoseNothingAndGrantNothingTwice(_ engine: StoreEngine) async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let appCoinsAPI = try AppCoinsAPIStandIn(purchases: [:])
        let googlePlayAPI = try GooglePlayAPIStandIn(purchases: [:])
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await engine.freshURL(), appCoinsURL: appCoinsAPI.baseURL,
                                            googlePlay: googlePlayAPI, catalog: PurchaseInput.catalog)
        var plan = PurchaseInput.Plan(unique: 120, users: 10, firstTransactionId: 5_000_000)
        (plan.duplicates, plan.forged, plan.malformed, plan.subscriptions) = (20, 3, 3, 4)
        plan.products = PurchaseInput.mixedProducts
        let googlePlay = try StandInGooglePlay(signer: pipeline.googlePlay, api: googlePlayAPI)
        let input = try PurchaseInput.make(plan, pki: pki, codec: pipeline.codec, now: Date(),
                                           appCoins: StandInAppCoins(signer: pipeline.appCoins, api: appCoinsAPI), googlePlay: googlePlay)
        let watcher = try PipelineWatcher(kafka: KafkaConfiguration(["bootstrap.servers": servers]), codec: pipeline.codec,
                                          groupID: pipeline.codec.topicPrefix + "watcher")
        try await waitUntil("the watcher holds its partitions") { watcher.isAssigned }
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        for result in await producer.send(contentsOf: input.messages) { _ = try result.get() }
        // Restart the granter, then the verifier, while purchases are in flight.
        try await waitUntil("some purchases finished") { (try await pipeline.store.statistics().purchasesByState[.finished] ?? 0) >= 10 }
        try await pipeline.restart(1)
        try await pipeline.restart(0)
        try await waitUntil("every message's outcome seen", timeout: .seconds(120)) { watcher.outcomes(of: input) == input.outcomesExpected }
        try await waitUntil("every submission answered") {
            watcher.read { $0.grantAnswers + $0.alreadyGrantedAnswers } >= input.unique.count + plan.duplicates
        }
        try await pipeline.stop()
        await watcher.stop()
        let books = try await PipelineBooks.check(input: input, seen: watcher.seen, store: pipeline.store, finishCalls: pipeline.appStore.finishTimes)
        #expect(books.violations.isEmpty, "\(books.violations)")
        let outcomes: [Int] = [books.grantedOnce, books.finished, books.rejected, books.deadLettered]
        #expect(outcomes == [132, 132, 3, 3], "granted once, finished, forgeries rejected, malformed dead-lettered")
        #expect(books.finishCalls >= 72, "every App Store purchase finished through the API (AppCoins has no such call)")
        #expect(input.unique.count { $0.store == .googleplay } == 40)
        #expect(googlePlay.completionViolations(input.unique).isEmpty, "\(googlePlay.completionViolations(input.unique))")
    }
}

extension PipelineTests {
    @Test func hostileMessagesAreDeadLetteredWithTheirReasonAndTheWorkersKeepGoing() async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await StoreEngine.sqlite.freshURL())
        let good = try pipeline.codec.message(PurchaseSubmitted(
            store: .appstore, kind: .signedTransaction,
            signedTransaction: try JWSSigner(pki: pki).sign(AppStorePayloads.transaction(transactionId: "6000001", productId: "coins.100", bundleId: Self.bundle)),
            userId: "user-1", submittedAt: Date(), source: .client), time: Date())
        func variant(_ value: Data?, dropping header: String? = nil) -> KafkaProducerMessage {
            KafkaProducerMessage(topic: good.topic, key: good.key, value: value, headers: good.headers.filter { $0.key != header })
        }
        let hostile = [
            variant(Data([0x7B, 0x22, 0xC3, 0x28, 0x22, 0x7D])),                                   // invalid UTF-8
            variant(Data((String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)).utf8)), // 10,000 levels
            variant(Data(#"{"store":"appstore","kind":"signedTransaction","userId":"u","source":"client","submittedAt":"2026-11-29T10:00:00Z","extra":1}"#.utf8)),
            variant(Data(#"{"store":"appstore","kind":"signedTransaction","signedTransaction":"x","userId":"'; DROP TABLE purchases; --","source":"client","submittedAt":"2026-11-29T10:00:00Z","quantity":1e400}"#.utf8)),
            variant(good.value, dropping: "ce_specversion"),
            variant(nil),                                                                             // tombstone
            variant(Data(repeating: 0x20, count: 1_100_000)),                                         // over 1 MiB
            good,
        ]
        // A producer that allows records over 1 MiB, as a misconfigured one might.
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers, "message.max.bytes": "4000000"])))
        for result in await producer.send(contentsOf: hostile) { _ = try result.get() }
        try await waitUntil("the good purchase after them is finished") {
            try await pipeline.store.statistics().purchasesByState[.finished] == 1
        }
        try await waitUntil("seven dead letters") { pipeline.runners[0].counters.withLock { $0["deadLettered"] } == 7 }
        try await pipeline.stop()
        #expect(try await pipeline.store.balances(of: "user-1") == ["coins": 100])
    }
}

extension PipelineTests {
    @Test func appCoinsPurchasesFinishWhenTheStoreOrTheAppReportsThemConsumed() async throws {
        let servers = try TestServices.requireBrokers()
        // The AppCoins API as documented: a Google-style ProductPurchase per token.
        let appCoins = try AppCoinsAPIStandIn(purchases: [
            "tok-consumed": .init(packageName: "com.example.coins", sku: "coins.100", orderId: "order-tok-consumed", consumptionState: 1),
            "tok-open": .init(packageName: "com.example.coins", sku: "coins.100", orderId: "order-tok-open"),
            "tok-pending": .init(packageName: "com.example.coins", sku: "coins.100", orderId: "order-tok-pending", purchaseState: 2),
            // The cheapest SKU named like ours, bought in an app of someone else's.
            "tok-foreign": .init(packageName: "com.attacker.app", sku: "coins.100", orderId: "order-tok-foreign"),
        ])
        // Pending payments are asked about again after 2 s, then less and less often.
        let pipeline = try await Self.start(servers: servers, pki: try TestPKI.make(), storeURL: try await StoreEngine.sqlite.freshURL(),
                                            appCoinsURL: appCoins.baseURL, pendingRecheck: .seconds(2))
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        let answers = Recorder()
        let watcher = RunningConsumer(try KafkaConsumer(configuration: .init(
            kafka: testConsumerKafka(servers), groupID: uniqueName("w"), topics: [pipeline.codec.topic(.purchaseRejected)]))) { await answers.record($0) }
        let forger = try AppCoinsSigner()
        // One user, so one partition: the pending purchase must not hold the purchases behind it.
        let submissions = [
            try pipeline.appCoinsSubmission(token: "tok-pending", user: "player-1"),
            try pipeline.appCoinsSubmission(token: "tok-consumed", user: "player-1"),
            try pipeline.appCoinsSubmission(token: "tok-open", user: "player-1"),
            try pipeline.appCoinsSubmission(token: "unknown-token", user: "player-1"),
            try pipeline.appCoinsSubmission(token: "tok-foreign", user: "player-1", package: "com.attacker.app", signer: forger),
            try pipeline.appCoinsSubmission(token: "tok-open-forged", user: "player-1", signer: forger),
            // The shape before purchases were signed: answered, not dead-lettered.
            try pipeline.codec.message(PurchaseSubmitted(store: .appcoins, kind: .appcoinsPurchase,
                                                         appcoins: .init(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "tok-open",
                                                                         purchaseData: nil, signature: nil),
                                                         userId: "player-1", submittedAt: Date(), source: .server), time: Date()),
        ]
        for result in await producer.send(contentsOf: submissions) { _ = try result.get() }
        let consumedKey = PurchaseKey(store: .appcoins, transactionId: "order-tok-consumed")
        let openKey = PurchaseKey(store: .appcoins, transactionId: "order-tok-open")
        try await waitUntil("the store-consumed purchase is finished and the other granted") {
            let consumed = try await pipeline.store.purchase(consumedKey)?.state
            let open = try await pipeline.store.purchase(openKey)?.state
            return consumed == .finished && open == .granted
        }
        for result in await producer.send(contentsOf: [try pipeline.codec.message(
            PurchaseConsumed(store: .appcoins, transactionId: "order-tok-open", userId: "player-1", consumedAt: Date()), time: Date())]) {
            _ = try result.get()
        }
        try await waitUntil("the app-consumed purchase is finished") { try await pipeline.store.purchase(openKey)?.state == .finished }
        try await waitUntil("five rejections answered") { await answers.messages.count >= 5 }
        try await watcher.stop()
        let reasons = await answers.messages.compactMap { $0.value.flatMap { JSONValue.parse(Array($0))?.objectValue } }
            .map { ($0["reason"]?.stringValue ?? "", $0["retryable"]?.boolValue ?? false) }
        #expect(Set(reasons.map(\.0)) == ["purchasePending", "storeRejected", "wrongPackage", "badSignature", "signatureRequired"], "\(reasons)")
        #expect(reasons.first { $0.0 == "purchasePending" }?.1 == true, "pending: submit again later")

        // The payment settles; the verifier's re-check finds it so without a new submission, and grants it.
        let pendingKey = PurchaseKey(store: .appcoins, transactionId: "order-tok-pending")
        #expect(try await pipeline.store.purchase(pendingKey) == nil)
        appCoins.set("tok-pending", .init(packageName: "com.example.coins", sku: "coins.100", orderId: "order-tok-pending"))
        try await waitUntil("the settled purchase granted on its re-check") { try await pipeline.store.purchase(pendingKey)?.state == .granted }
        try await waitUntil("the re-check is off the parking ledger") { try await StoreParkingLedger(store: pipeline.store).parkedByStage().isEmpty }
        // The app submits it again too: already granted, nothing more.
        let granterHandled = { pipeline.runners[1].counters.withLock { $0["handled"] ?? 0 } }
        let before = granterHandled()
        for result in await producer.send(contentsOf: [try pipeline.appCoinsSubmission(token: "tok-pending", user: "player-1")]) { _ = try result.get() }
        try await waitUntil("the granter saw the repeat") { granterHandled() > before }
        try await pipeline.stop()
        #expect(try await pipeline.store.balances(of: "player-1") == ["coins": 300], "the unknown token (404), the foreign app and the forgery grant nothing")
        #expect(try await pipeline.store.purchase(openKey)?.purchaseToken == "tok-open", "kept to ask the store again")
    }
}

@Suite struct StageRetryClassificationTests {
    @Test func storeBackedStagesRetryRetriableDatabaseErrorsOnly() throws {
        let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test")
        let store = try SQLPurchaseStore(url: "sqlite:" + FileManager.default.temporaryDirectory.appendingPathComponent("c-\(UUID().uuidString).sqlite").path)
        let stage: any MessageStage = FinisherStage(context: StageContext(codec: codec, logger: Logger(stage: "t", minimum: .error)), store: store, appStoreAPI: nil)
        #expect(stage.isTransient(DatabaseError(code: "40001", message: "serialization", isRetriable: true)))
        #expect(!stage.isTransient(DatabaseError(code: "23505", message: "unique", isRetriable: false)))
        #expect(stage.isTransient(TransientError("store API down")))
        #expect(!stage.isTransient(CancellationError()))
    }
}

extension StageRetryClassificationTests {
    /// `item.granted` carries the user's balance once the grant applied, also when it answers a repeat, so a
    /// backend mirroring events need not ask.
    @Test func itemGrantedCarriesTheUsersResultingBalance() async throws {
        let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test")
        let store = try SQLPurchaseStore(url: "sqlite:" + FileManager.default.temporaryDirectory.appendingPathComponent("b-\(UUID().uuidString).sqlite").path)
        _ = try await store.migrate()
        let catalog = try ProductCatalog(contentsOf: TestServices.packageRoot.appendingPathComponent("schemas/examples/catalog.json"), schemas: PipelineTests.schemas)
        let now = Date()
        let stage = GranterStage(context: StageContext(codec: codec, logger: Logger(stage: "t", minimum: .error), now: { now }), store: store,
                                 catalog: catalog, clawBackDueRefunds: false)
        func grant(_ id: TransactionID, _ product: ProductID) async throws -> [GrantedItem] {
            let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: "u-b", productId: product, quantity: 1, purchaseTime: now)
            _ = try await store.recordVerified(record, at: now)
            let verified = PurchaseVerifiedEvent(store: .appstore, transactionId: id, productId: product, quantity: 1, userId: "u-b", purchaseDate: now,
                                                 source: .client, verifiedAt: now)
            let message = try codec.message(verified, time: now)
            guard case .publish(let out) = try await stage.handle(KafkaMessage(topic: message.topic, partition: 0, offset: 0, key: message.key,
                                                                             value: message.value, headers: message.headers)),
                  let value = out.first?.value, case .success(let granted) = codec.decodeBody(value, as: ItemGranted.self) else {
                Issue.record("no item.granted for \(id)"); return []
            }
            return granted.items
        }
        #expect(try await grant("b-1", "coins.100").map(\.balance) == [100])
        #expect(try await grant("b-2", "coins.1000").map(\.balance) == [1100], "the balance after this grant, not the amount")
        #expect(try await grant("b-1", "coins.100").map(\.balance) == [1100], "a repeat answers the balance as it stands")
        let adfree = try await grant("b-3", "adfree")
        #expect(adfree.map(\.code) == ["adfree"])
        #expect(adfree.first?.balance == nil, "an entitlement has no balance")
    }
}

extension PipelineTests {
    @Test func theSweeperFinishesWhatAppCoinsReportsConsumedAndFlagsTheRestOnce() async throws {
        let servers = try TestServices.requireBrokers()
        let appCoins = try AppCoinsAPIStandIn(purchases: Dictionary(uniqueKeysWithValues: ["t-consumed", "t-open", "t-unsure"].map { token in
            (token, AppCoinsAPIStandIn.Purchase(packageName: "com.example.coins", sku: "coins.100", orderId: "o-\(token)",
                                                consumptionState: token == "t-consumed" ? 1 : 0))
        }))
        let store = try SQLPurchaseStore(url: try await StoreEngine.sqlite.freshURL())
        try await store.migrate()
        let old = Date().addingTimeInterval(-30 * 3600)
        for token in ["t-consumed", "t-open", "t-unsure"] {
            let record = PurchaseRecord(key: PurchaseKey(store: .appcoins, transactionId: "o-\(token)"), userId: "p", productId: "coins.100", productType: .consumable,
                                        quantity: 1, purchaseTime: old, packageName: "com.example.coins", purchaseToken: PurchaseToken(token))
            _ = try await store.recordVerified(record, at: old)
            _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: old)
        }
        let prefix = "s\(UUID().uuidString.prefix(6).lowercased())."
        try await KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).createTopics(EventCodec.pipelineTopics(prefix: prefix), partitions: 1)
        let context = StageContext(codec: EventCodec(schemas: Self.schemas, source: "/test/sweeper", topicPrefix: prefix),
                                   logger: Logger(stage: "sweeper", minimum: .error))
        let verifier = AppCoinsVerifier(configuration: .init(baseURL: appCoins.baseURL, timeout: .seconds(5)))
        let sweeper = SweeperService(configuration: .init(deadlines: [.appcoins: 24 * 3600]), store: store,
                                     producer: try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers]))),
                                     context: context, clock: ContinuousClock(), appCoins: verifier)
        // A broker that takes nothing: the consumed purchase's transaction.finished cannot be sent, so it stays granted and
        // the next sweep sends the event and finishes it (finished first, its event was lost for good).
        let cutOff = SweeperService(configuration: .init(deadlines: [.appcoins: 24 * 3600]), store: store,
                                    producer: try KafkaProducer(configuration: .init(kafka: KafkaConfiguration([
                                        "bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": "1000"]))),
                                    context: context, clock: ContinuousClock(), appCoins: verifier)
        await #expect(throws: (any Error).self) { try await cutOff.sweepOnce() }
        #expect(try await store.purchase(PurchaseKey(store: .appcoins, transactionId: "o-t-consumed"))?.state == .granted)
        let finished = Recorder()
        let watcher = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: uniqueName("w"),
                                                                             topics: [context.codec.topic(.transactionFinished)]))) { await finished.record($0) }
        // "t-unsure" is asked while the API is down: it must not be flagged on a guess.
        appCoins.fail(503)
        #expect(try await sweeper.sweepOnce() == 0)
        appCoins.fail(nil)
        #expect(try await sweeper.sweepOnce() == 2, "t-open and t-unsure are due; t-consumed is finished instead")
        #expect(try await sweeper.sweepOnce() == 0, "exactly once")
        #expect(try await store.purchase(PurchaseKey(store: .appcoins, transactionId: "o-t-consumed"))?.state == .finished)
        #expect(try await store.purchase(PurchaseKey(store: .appcoins, transactionId: "o-t-open"))?.state == .refundDue)
        #expect(try await store.unsentRefundNotices(store: .appcoins, deadline: 24 * 3600).isEmpty, "refund.due sent")
        try await waitUntil("the finished event is on its topic") { await finished.values.contains { $0.contains("o-t-consumed") } }
        try await watcher.stop()
    }
}

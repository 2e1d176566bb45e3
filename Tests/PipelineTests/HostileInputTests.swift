import Foundation
import PurchaseDomain
import JSON
import Kafka
import PurchaseEvents
import PurchaseStore
import StoreFixtures
import Testing
import TestSupport

/// Input that is well-formed and correctly signed but hostile in its content: each case has a defined
/// outcome (a grant, or a rejection with its reason), and the workers keep going. Malformed input (invalid
/// UTF-8, 10,000 levels, over 1 MiB, numbers out of range, unknown fields, tombstones) is in
/// `PipelineTests.hostileMessagesAreDeadLetteredWithTheirReasonAndTheWorkersKeepGoing`.
extension PipelineTests {
    /// SQL metacharacters, quotes, backslashes, format and URL metacharacters, and non-ASCII.
    static let hostile = "'; DROP TABLE purchases; -- \" \\ ünï 🪙 %s %00 $1 ?x=1#f /../"
    /// Control characters, NUL among them: ids carrying them are refused at the door (the schemas' id pattern).
    static let controlCharacters = "\u{0}\u{1}\u{7}\u{1B}[2J\n\r\t\u{7F}"

    @Test(arguments: StoreEngine.available)
    func signedPurchasesWithHostileContentGetTheirDefinedOutcomes(_ engine: StoreEngine) async throws {
        let servers = try TestServices.requireBrokers()
        // AppCoins, as documented, answering an order id that is also an App Store transaction id.
        let appCoins = try AppCoinsAPIStandIn(purchases: ["tok-twin": .init(packageName: "com.example.coins", sku: "coins.100", orderId: "7100001",
                                                                          consumptionState: 1)])
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await engine.freshURL(),
                                            appCoinsURL: appCoins.baseURL)
        let signer = JWSSigner(pki: pki)
        let hostileId = TransactionID("7000001" + Self.hostile)
        let hostileUser = UserID("user" + Self.hostile)
        func submission(_ transactionId: TransactionID, product: String = "coins.100", user: UserID) throws -> KafkaProducerMessage {
                let jws = try signer.sign(AppStorePayloads.transaction(transactionId: transactionId.rawValue, productId: product, bundleId: Self.bundle,
                                                                   appAccountToken: UUID().uuidString.lowercased(),
                                                                   currency: Self.hostile + Self.controlCharacters))
            return try pipeline.codec.message(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws, userId: user,
                                                                submittedAt: Date(), source: .client), time: Date())
        }
        let answers = Recorder()
        let watcher = RunningConsumer(try KafkaConsumer(configuration: .init(
            kafka: testConsumerKafka(servers), groupID: uniqueName("w"),
            topics: [pipeline.codec.topic(.purchaseRejected), pipeline.codec.topic(.deadLetter)]))) { await answers.record($0) }
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        let first = [
            try submission(hostileId, user: hostileUser),                      // hostile ids and strings: granted, stored verbatim
            try submission("7000002", product: "coins.100" + Self.hostile, user: "user-2"), // hostile product: rejected unknownProduct
            try submission("7000003", user: UserID("user-6" + Self.controlCharacters)),  // control characters in an id: dead-lettered
            try submission(TransactionID("7000004" + Self.controlCharacters), user: "user-7"),  // … in a signed id: rejected, not recorded
            try submission("7100001", user: "user-3"),                        // App Store twin of the AppCoins order below
            try pipeline.appCoinsSubmission(token: "tok-twin", user: "user-4"),
        ]
        for result in await producer.send(contentsOf: first) { _ = try result.get() }
        let hostileKey = PurchaseKey(store: .appstore, transactionId: hostileId)
        // Signed by the trusted chain, so granted; but no App Store transaction id has such characters, and the
        // client refuses to put it in a URL: not finished, dead-lettered `storeRefusedFinish`, left for the sweeper.
        try await waitUntil("the hostile purchase granted and both twins finished") {
            let hostile = try await pipeline.store.purchase(hostileKey)?.state
            let appStoreTwin = try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: "7100001"))?.state
            let appCoinsTwin = try await pipeline.store.purchase(PurchaseKey(store: .appcoins, transactionId: "7100001"))?.state
            return hostile == .granted && appStoreTwin == .finished && appCoinsTwin == .finished
        }
        // The same signed transaction, replayed under another user id.
        for result in await producer.send(contentsOf: [try submission(hostileId, user: "user-5")]) { _ = try result.get() }
        try await waitUntil("three rejections and two dead letters") { await answers.count >= 5 }
        try await watcher.stop()
        try await pipeline.stop()

        let stored = try #require(try await pipeline.store.purchase(hostileKey))
        #expect(stored.userId == hostileUser, "stored verbatim")
        #expect(try await pipeline.store.balances(of: hostileUser) == ["coins": 100])
        #expect(try await pipeline.store.balances(of: "user-5") == [:], "a replay under another user grants nothing")
        #expect(try await pipeline.store.balances(of: "user-2") == [:])
        #expect(try await pipeline.store.balances(of: "user-3") == ["coins": 100], "same id, other store: a purchase of its own")
        #expect(try await pipeline.store.balances(of: "user-4") == ["coins": 100])
        #expect(try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: "7000003")) == nil)
        let reasons = await answers.messages.compactMap { message in
            message.value.flatMap { JSONValue.parse(Array($0))?.objectValue }.map { ($0["userId"]?.stringValue ?? "", $0["reason"]?.stringValue ?? "") }
        }
        #expect(reasons.contains { $0 == ("user-2", "unknownProduct") }, "\(reasons)")
        #expect(reasons.contains { $0 == ("user-5", "transactionOfAnotherUser") }, "\(reasons)")
        #expect(reasons.contains { $0 == ("user-7", "malformedPayload") }, "\(reasons)")
        #expect(try await !pipeline.store.audit().purchases.keys.contains { $0.transactionId.rawValue.hasPrefix("7000004") }, "not recorded")
        #expect(reasons.contains { $0.1 == "schemaViolation" }, "the control characters' dead letter: \(reasons)")
        #expect(reasons.contains { $0.1 == "storeRefusedFinish" }, "\(reasons)")
        #expect(try await pipeline.store.purchase(hostileKey)?.state == .granted)
        #expect(pipeline.appStore.requests == ["POST /inApps/v1/transactions/7100001/finish"], "no request with the hostile id reached the API")
    }
}

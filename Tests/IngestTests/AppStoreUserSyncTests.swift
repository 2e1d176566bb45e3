import Crypto
import Foundation
import Ingest
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StageTestSupport
import StoreFixtures
@testable import HTTPServer
import Metrics
import StoreVerification
import Testing
import WorkerRuntime

/// "Sync this user" against a stand-in App Store Server API over real HTTP, a SQLite store and librdkafka's mock cluster:
/// the history of the account behind a transaction the user owns, every page, and a `purchase.submitted` for each
/// transaction the pipeline has not recorded or holds unclaimed — nothing else, and never from another user's account.
@Suite struct AppStoreUserSyncTests {
    static let t0 = Date(timeIntervalSince1970: 1_765_000_000)
    let cluster: KafkaMockCluster
    let pki: TestPKI
    let key: PrivateKey
    let api: AppStoreServerAPIStandIn
    let store: SQLPurchaseStore

    init() async throws {
        cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic(StageFixtures.codec.topic(.purchaseSubmitted), partitions: 1)
        pki = try TestPKI.make(name: "user sync")
        key = try PrivateKey.generateP256()
        api = try AppStoreServerAPIStandIn(publicKey: try key.publicKey(), keyId: "KEY1", issuerId: "issuer", bundleId: StageFixtures.bundleID.rawValue)
        api.setTransactionPageSize(2)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("user-sync-\(UUID().uuidString).sqlite")
        store = try SQLPurchaseStore(url: "sqlite:\(file.path)")
        try await store.migrate()
    }

    func sync(minimumInterval: Duration = .seconds(60)) throws -> AppStoreUserSync {
        let client = AppStoreServerAPIClient(configuration: .init(baseURL: api.baseURL, keyId: "KEY1", issuerId: "issuer", bundleId: StageFixtures.bundleID,
                                                                  privateKey: key))
        let publisher = try EventPublisher(codec: StageFixtures.codec, kafka: KafkaConfiguration(["bootstrap.servers": cluster.bootstrapServers]))
        return AppStoreUserSync(store: store, apis: [.sandbox: client], publisher: publisher, minimumInterval: minimumInterval, now: { Self.t0 })
    }

    /// A transaction of `customer`'s Apple account at the stand-in store; recorded in the pipeline's store as `recorded` says.
    enum Recorded { case no, grantedTo(UserID), unclaimed }
    @discardableResult
    func transaction(_ id: TransactionID, customer: String, recorded: Recorded = .no, token: AccountToken? = nil) async throws -> String {
        let signed = try JWSSigner(pki: pki).sign(AppStorePayloads.transaction(
            transactionId: id.rawValue, productId: "coins.100", bundleId: StageFixtures.bundleID.rawValue, environment: .sandbox,
            purchaseDate: Self.t0, signedDate: Self.t0, appAccountToken: token?.rawValue))
        api.recordTransaction(signed, transactionId: id, originalTransactionId: id, customer: customer)
        let key = PurchaseKey(store: .appstore, transactionId: id)
        switch recorded {
        case .no: break
        case .grantedTo(let user):
            _ = try await store.recordVerified(PurchaseRecord(key: key, userId: user, productId: "coins.100", productType: .consumable, quantity: 1,
                                                              purchaseTime: Self.t0, environment: "Sandbox", appAccountToken: token), at: Self.t0)
            _ = try await store.grant(key, items: [.currency("coins", 100)], at: Self.t0)
        case .unclaimed:
            _ = try await store.recordUnclaimed(PurchaseRecord(key: key, userId: .nobody, productId: "coins.100", productType: .consumable, quantity: 1,
                                                               purchaseTime: Self.t0, environment: "Sandbox"), at: Self.t0)
        }
        return signed
    }

    @Test func theUsersAccountHistoryIsSubmittedForWhatThePipelineHasNotRecorded() async throws {
        try await transaction("1001", customer: "account-a", recorded: .grantedTo("user-1"))
        try await transaction("1002", customer: "account-a", recorded: .grantedTo("user-1"))
        let unseen = try await transaction("1003", customer: "account-a")
        let unclaimed = try await transaction("1004", customer: "account-a", recorded: .unclaimed)
        try await transaction("1005", customer: "account-a")
        try await transaction("2001", customer: "account-b", recorded: .grantedTo("user-2"))
        try await transaction("2002", customer: "account-b")

        let report = try await sync().sync("user-1").get()
        #expect(report.listed == 5 && report.submitted == 3 && report.complete, "every page read, newest first; the two recorded skipped")
        #expect(report.transactionId == "1002", "the newest transaction the user owns opens the history")
        let submitted = try await StageFixtures.events(PurchaseSubmitted.self, atLeast: 3, at: cluster.bootstrapServers).map(\.event)
        #expect(Set(submitted.compactMap(\.signedTransaction)).isSuperset(of: [unseen, unclaimed]))
        #expect(Set(submitted.compactMap { $0.signedTransaction.flatMap { Base64URL.unverifiedJWSPayload($0)?["transactionId"]?.stringValue } }) == ["1003", "1004", "1005"],
                "never account-b's")
        #expect(submitted.allSatisfy { $0.userId == "user-1" && $0.source == .server && $0.kind == .signedTransaction })
    }

    @Test func aUserWithoutAnAppStoreTransactionCannotSyncAndNobodySyncsTwiceWithinTheInterval() async throws {
        let sync = try sync()
        #expect(await sync.sync("stranger") == .failure(.noTransaction))
        try await transaction("3001", customer: "account-c", recorded: .grantedTo("user-3"))
        #expect(try await sync.sync("user-3").get().submitted == 0)
        guard case .failure(.tooSoon(let wait)) = await sync.sync("user-3") else {
            Issue.record("a second sync within the interval was not refused")
            return
        }
        #expect(wait == .seconds(60))
    }

    @Test func anAppStoreThatCannotBeAskedSubmitsNothingAndSaysWhenToRetry() async throws {
        try await transaction("4001", customer: "account-d", recorded: .grantedTo("user-4"))
        try await transaction("4002", customer: "account-d")
        api.fail(.init(status: 429, retryAfterSeconds: 30))
        let syncing = try sync(minimumInterval: .zero)
        let asked = ContinuousClock.now
        guard case .failure(.storeUnavailable(_, let wait)) = await syncing.sync("user-4") else {
            Issue.record("a 429 was not reported unavailable")
            return
        }
        // What is left of Apple's 30 s when the answer is read, however slow the machine.
        let took = ContinuousClock.now - asked
        #expect(wait.map { $0 >= .seconds(29) - took && $0 <= .seconds(30) } == true, "\(String(describing: wait)), the sync took \(took)")
        api.fail(nil)
        #expect(try await sync(minimumInterval: .zero).sync("user-4").get().submitted == 1)
    }

    /// Reading newest first stops at the first page the pipeline holds all of: what it misses is newer.
    @Test func readingStopsAtThePageThePipelineHoldsAllOf() async throws {
        for id in 5001...5002 { try await transaction(TransactionID(String(id)), customer: "account-e") }                          // older, unseen
        for id in 5003...5004 { try await transaction(TransactionID(String(id)), customer: "account-e", recorded: .grantedTo("user-5")) }
        for id in 5005...5006 { try await transaction(TransactionID(String(id)), customer: "account-e") }                          // newest, unseen
        let report = try await sync().sync("user-5").get()
        #expect(report.submitted == 2 && report.listed == 4 && !report.complete)
        #expect(report.transactionId == "5004")
    }

    /// Two app users on one Apple account: what is bound to the other's account token is not submitted for this one.
    @Test func aTransactionBoundToAnotherUsersTokenIsLeftAlone() async throws {
        let (mine, theirs): (AccountToken, AccountToken) = ("6f1c0b9e-8a1d-4c53-9a3e-0d6c1b2a7e41", "0b0c3c2a-1d2e-4f5a-8b9c-7d6e5f4a3b21")
        try await transaction("6001", customer: "family", recorded: .grantedTo("user-6"), token: mine)
        let theirsUnseen = try await transaction("6002", customer: "family", token: theirs)
        let mineUnseen = try await transaction("6003", customer: "family", token: AccountToken(mine.rawValue.uppercased()))
        let unbound = try await transaction("6004", customer: "family")
        #expect(try await sync().sync("user-6").get().submitted == 2)
        let submitted = try await StageFixtures.events(PurchaseSubmitted.self, atLeast: 2, at: cluster.bootstrapServers).map(\.event)
        #expect(Set(submitted.compactMap(\.signedTransaction)) == [mineUnseen, unbound], "never \(theirsUnseen.prefix(8))…")
        #expect(submitted.allSatisfy { $0.appAccountToken == mine }, "the user's token named: the verifier refuses another's")
    }

    /// `POST /v1/users/{userId}/sync` is the sync; `GET /v1/users/sync` reads the holdings of a user named `sync`.
    @Test func theSyncRouteIsTheUsersSegmentThenSync() async throws {
        try await transaction("7001", customer: "account-f", recorded: .grantedTo("sync"))
        let api = UserHoldingsAPI(store: store, secret: nil, logger: Logger(stage: "ingest", minimum: .error), metrics: MetricsRegistry(),
                                  sync: try sync(), now: { Self.t0 })
        func request(_ method: String, _ path: String) -> HTTPRequest {
            HTTPRequest(method: method, path: path, query: nil, headers: [:], body: Data())
        }
        #expect(await api.route(request("GET", "/v1/users/sync"))?.status == 200)
        #expect(await api.route(request("POST", "/v1/users/sync/sync"))?.status == 202)
        #expect(await api.route(request("GET", "/v1/users/sync/sync"))?.status == 405)
        #expect(await api.route(request("GET", "/v1/users/a/b/sync"))?.status == 400, "not one user segment")
    }
}

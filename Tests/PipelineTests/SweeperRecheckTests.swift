import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import StoreFixtures
import StoreVerification
import Testing
import TestSupport
import WorkerRuntime

extension PipelineTests {
    /// More granted AppCoins purchases are due than a batch holds: each is flagged only once the store answered that it
    /// was not consumed — every page of them is asked, a consumed one past the first page is finished, and one the API
    /// fails for (or every one, while it is down: one page asked, then the round ends) is left for a later sweep. A due
    /// purchase no re-check applies to (never granted) is flagged all the same, also while the API is down.
    @Test(arguments: StoreEngine.available)
    func theSweeperFlagsNoAppCoinsPurchaseItDidNotReCheck(_ engine: StoreEngine) async throws {
        let servers = try TestServices.requireBrokers()
        let tokens = (0..<5).map { "r\($0)" }
        let appCoins = try AppCoinsAPIStandIn(purchases: Dictionary(uniqueKeysWithValues: tokens.map { token in
            (PurchaseToken(token), AppCoinsAPIStandIn.Purchase(packageName: "com.example.coins", sku: "coins.100", orderId: "o-\(token)",
                                                consumptionState: token == "r3" ? 1 : 0))
        }))
        let store = try SQLPurchaseStore(url: try await engine.freshURL())
        try await store.migrate()
        let old = Date().addingTimeInterval(-30 * 3600)
        func key(_ token: String) -> PurchaseKey { PurchaseKey(store: .appcoins, transactionId: "o-\(token)") }
        // r0…r4 granted, oldest first; "v" verified only, the newest: no re-check applies to it.
        for (index, token) in (tokens + ["v"]).enumerated() {
            let record = PurchaseRecord(key: key(token), userId: "p", productId: "coins.100", productType: .consumable, quantity: 1,
                                        purchaseTime: old.addingTimeInterval(Double(index)), packageName: "com.example.coins", purchaseToken: PurchaseToken(token))
            _ = try await store.recordVerified(record, at: old)
            if token != "v" { _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: old) }
        }
        let prefix = "r\(UUID().uuidString.prefix(6).lowercased())."
        try await KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).createTopics(EventCodec.pipelineTopics(prefix: prefix), partitions: 1)
        let context = StageContext(codec: EventCodec(schemas: Self.schemas, source: "/test/sweeper", topicPrefix: prefix),
                                   logger: Logger(stage: "sweeper", minimum: .error))
        let sweeper = SweeperService(configuration: .init(deadlines: [.appcoins: 24 * 3600], batchSize: 2), store: store,
                                     producer: try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers]))),
                                     context: context, clock: ContinuousClock(),
                                     appCoins: AppCoinsVerifier(configuration: .init(baseURL: appCoins.baseURL, timeout: .seconds(5))))
        func states() async throws -> [String] {
            var states: [String] = []
            for token in tokens + ["v"] { states.append(try await store.purchase(key(token))?.state.rawValue ?? "none") }
            return states
        }

        appCoins.fail(503)
        let whileDown = try await sweeper.sweepOnce()
        #expect(whileDown == 1, "the API down: only the purchase no re-check applies to")
        #expect(try await states() == ["granted", "granted", "granted", "granted", "granted", "refund_due"])
        #expect(appCoins.requests.count == 2, "a page none of which could be asked ends the round")

        appCoins.fail(nil)
        appCoins.fail(503, token: "r4")
        let asked = appCoins.requests.count
        let flagged = try await sweeper.sweepOnce()
        #expect(flagged == 3, "r0, r1 and r2, each answered unconsumed")
        #expect(try await states() == ["refund_due", "refund_due", "refund_due", "finished", "granted", "refund_due"],
                "r3 (past the first page) is consumed: finished; r4 could not be asked: not flagged")
        #expect(Set(appCoins.requests.dropFirst(asked).compactMap { $0.split(separator: "/").last.map(String.init) }) == Set(tokens),
                "every granted purchase due was asked")

        appCoins.fail(nil, token: "r4")
        let last = try await sweeper.sweepOnce()
        #expect(last == 1, "r4, asked again")
        #expect(try await store.purchase(key("r4"))?.state == .refundDue)
        #expect(try await sweeper.sweepOnce() == 0, "exactly once")
        #expect(try await store.unsentRefundNotices(store: .appcoins, deadline: 24 * 3600).isEmpty, "refund.due sent")
    }
}

import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
@testable import PurchaseStore
import Stages
import StageTestSupport
import TestData
import Testing
import TestSupport
import WorkerRuntime

/// The stages take ids Swift's `String` takes as equal, but whose bytes differ, for different users and transactions:
/// the granter's batch answers each user with their own balance (stages driven directly on real stores: no broker). A
/// restore by a user whose id only looks like the owner's: StagesTests' `VerifierAnswerTests`.
@Suite struct ByteIdentityStageTests {
    static let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test")
    static let now = Date(timeIntervalSince1970: 1_764_700_000)

    static func freshStore(_ engine: StoreEngine) async throws -> SQLPurchaseStore {
        let store = try SQLPurchaseStore(url: try await engine.freshURL())
        try await store.migrate()
        return store
    }

    static func granter(_ store: SQLPurchaseStore) -> GranterStage {
        GranterStage(context: StageContext(codec: codec, logger: Logger(stage: "granter", minimum: .error), now: { now }), store: store,
                     catalog: StageFixtures.catalog, clawBackDueRefunds: false)
    }

    /// `purchase.verified` messages of one partition, in order, for coin packs and ad-free bought by confusable users
    /// under confusable transaction ids (an AppCoins order id is the store's text), some repeated: recorded, then granted.
    static func verified(seed: UInt64, count: Int) throws -> (records: [PurchaseRecord], messages: [KafkaMessage]) {
        var generator = SeededGenerator(seed: seed)
        let spellings = ConfusableIdentifiers.all
        var records: [PurchaseRecord] = []
        for index in 0..<count {
            let product: ProductID = ["coins.100", "coins.1000", "coins.100"][index % 3]
            records.append(PurchaseRecord(key: PurchaseKey(store: .appcoins, transactionId: TransactionID(spellings[index % spellings.count] + "/\(index)")),
                                          userId: UserID(spellings.randomElement(using: &generator)!), productId: product, productType: .consumable,
                                          quantity: 1, purchaseTime: now))
        }
        let repeated = records + (0..<count / 4).map { _ in records.randomElement(using: &generator)! }
        let messages = try repeated.enumerated().map { offset, record in
            let produced = try codec.message(PurchaseVerifiedEvent(store: record.key.store, transactionId: record.key.transactionId,
                                                                   productId: record.productId, productType: "consumable", quantity: 1,
                                                                   userId: record.userId, purchaseDate: now, source: .client, verifiedAt: now), time: now)
            return KafkaMessage(topic: produced.topic, partition: 0, offset: Int64(offset), key: produced.key, value: produced.value,
                                headers: produced.headers)
        }
        return (records, messages)
    }

    /// What the granter published for one message, as bytes: each event's user, transaction and items with their
    /// balances, without the ledger entry id (a batch reserves ids ahead).
    static func published(_ result: StageResult) throws -> [[UInt8]] {
        guard case .publish(let events) = result else { return [Array("\(result)".utf8)] }
        return try events.map { event in
            let message = KafkaMessage(topic: event.topic, partition: 0, offset: 0, key: event.key, value: event.value, headers: event.headers)
            var granted = try codec.decode(message, as: ItemGranted.self).get()
            granted.ledgerEntryId = nil
            return Array("\(granted.userId.rawValue)|\(granted.transactionId.rawValue)|\(granted.alreadyGranted)|\(granted.items)".utf8)
        }
    }

    @Test(arguments: StoreEngine.available) func theGrantersBatchAnswersAndLeavesWhatMessagesOneByOneDo(_ engine: StoreEngine) async throws {
        for seed in [21, 22] as [UInt64] {
            let (records, messages) = try Self.verified(seed: seed, count: 48)
            let (alone, batched) = (try await Self.freshStore(engine), try await Self.freshStore(engine))
            for store in [alone, batched] {
                for record in records { #expect(try await store.recordVerified(record, at: Self.now) == .recorded) }
            }
            var expected: [[[UInt8]]] = []
            for message in messages { expected.append(try Self.published(try await Self.granter(alone).handle(message))) }
            let results = await Self.granter(batched).handle(batch: messages)
            #expect(results.count == messages.count, "seed \(seed): one batch answered every message")
            let answered = try results.map { try Self.published(try $0.get()) }
            #expect(answered == expected, "seed \(seed): the same item.granted events, balances included")
            for user in Set(records.map(\.userId)) {
                #expect(try await batched.balances(of: user) == alone.balances(of: user), "seed \(seed): \(Array(user.rawValue.utf8))")
            }
            #expect(try await batched.audit().balanceMismatches.isEmpty, "seed \(seed): the ledger is the balances")
        }
    }

    /// An adjustment naming a currency in another Unicode spelling than the catalog's (`café` decomposed, the catalog's
    /// precomposed) is an unknown item: refused, and no balance row is made for it. The catalog's spelling is applied.
    @Test(arguments: StoreEngine.available) func anAdjustmentSpellingACatalogCodeOtherwiseIsAnUnknownItem(_ engine: StoreEngine) async throws {
        let store = try await Self.freshStore(engine)
        let (precomposed, decomposed): (ItemCode, ItemCode) = ("caf\u{E9}", "cafe\u{301}")
        let catalog = try ProductCatalog(products: [.appstore: ["cafe.pack": .init(type: .consumable, currency: precomposed, amount: 7)]])
        let granter = GranterStage(context: StageContext(codec: Self.codec, logger: Logger(stage: "granter", minimum: .error), now: { Self.now }), store: store,
                                   catalog: catalog, clawBackDueRefunds: false)
        func adjust(_ id: AdjustmentID, _ code: ItemCode) async throws -> UserAdjusted? {
            let produced = try Self.codec.message(UserAdjustment(adjustmentId: id, userId: "player-1", requestedBy: "support", reason: "goodwill",
                                                                 items: [.init(kind: .currency, code: code, amount: 5)], requestedAt: Self.now), time: Self.now)
            let message = KafkaMessage(topic: produced.topic, partition: 0, offset: 0, key: produced.key, value: produced.value, headers: produced.headers)
            guard case .publish(let events) = try await granter.handle(message), let event = events.first else {
                Issue.record("\(id): not answered")
                return nil
            }
            return try Self.codec.decode(KafkaMessage(topic: event.topic, partition: 0, offset: 0, key: event.key, value: event.value, headers: event.headers),
                                         as: UserAdjusted.self).get()
        }
        func balanceRows() async throws -> [[UInt8]] {
            try await store.executor.run { connection in
                try connection.query("SELECT currency FROM balances WHERE user_id = $1", [.text("player-1")]).map { Array(($0[0].string ?? "").utf8) }
            }
        }
        let refused = try #require(try await adjust("nfd-1", decomposed))
        #expect(refused.outcome == .refused && refused.refusal == .unknownItem, "\(refused)")
        #expect(refused.detail?.contains("63 61 66 65 cc 81") == true && refused.detail?.contains("63 61 66 c3 a9") == true, "\(refused.detail ?? "")")
        #expect(try await balanceRows().isEmpty, "no balance row for the refused spelling")
        #expect(try await store.balances(of: "player-1").isEmpty)

        let applied = try #require(try await adjust("nfc-1", precomposed))
        #expect(applied.outcome == .applied && applied.items.map(\.balance) == [5])
        #expect(try await balanceRows() == [Array(precomposed.rawValue.utf8)], "the catalog's spelling, as its bytes")
    }

    /// Item codes key balances in memory as text: a catalog naming one code in two Unicode spellings is refused with both
    /// named, and product ids are looked up by their bytes.
    @Test func aCatalogSpellingOneItemCodeTwoWaysIsRefused() throws {
        func catalog(_ first: String, _ second: String) throws -> ProductCatalog {
            try ProductCatalog(json: Data("""
                {"appstore": {"coins.a": {"type": "consumable", "currency": "\(first)", "amount": 1},
                              "coins.b": {"type": "consumable", "currency": "\(second)", "amount": 2}}}
                """.utf8), schemas: PipelineTests.schemas)
        }
        #expect(throws: CatalogError.self) { try catalog("caf\u{E9}", "cafe\u{301}") }
        let alike = try catalog("caf\u{E9}", "caf\u{E9}")
        #expect(alike.product(.appstore, "coins.b")?.amount == 2)
        let products = try ProductCatalog(json: Data(#"{"appstore": {"\#u{212A}it": {"type": "nonConsumable", "entitlement": "kit"}}}"#.utf8),
                                          schemas: PipelineTests.schemas)
        #expect(products.product(.appstore, "\u{212A}it") != nil)
        #expect(products.product(.appstore, "Kit") == nil, "a product id is its bytes")
    }
}

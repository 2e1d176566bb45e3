import Database
import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
@testable import PurchaseStore
import Stages
import StageTestSupport
import Testing
import TestSupport
import WorkerRuntime

/// Amounts a 64-bit balance cannot take, through the granter on real stores (stages driven directly: no broker): an
/// adjustment of -9223372036854775808 or +9223372036854775807 is dead-lettered by its schema, purchases and an adjustment
/// of legal amounts whose sum would pass a balance's limit are refused with their reasons, a refund's reversal that would
/// is dead-lettered, and the messages after each are handled as ever: the books stay integers and balanced.
@Suite struct BalanceLimitStageTests {
    static let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test")
    static let now = Date(timeIntervalSince1970: 1_764_800_000)
    static let catalog = try! ProductCatalog(json: Data("""
        {"appstore": {"coins.100": {"type": "consumable", "currency": "coins", "amount": 100},
                      "coins.huge": {"type": "consumable", "currency": "coins", "amount": \(CurrencyAmounts.itemLimit)}}}
        """.utf8), schemas: PipelineTests.schemas)

    static func granter(_ store: SQLPurchaseStore) -> GranterStage {
        GranterStage(context: StageContext(codec: codec, logger: Logger(stage: "granter", minimum: .error), now: { now }), store: store,
                     catalog: catalog, clawBackDueRefunds: false)
    }

    static func message(_ event: some PipelineEvent, offset: Int) throws -> KafkaMessage {
        let produced = try codec.message(event, time: now)
        return KafkaMessage(topic: produced.topic, partition: 0, offset: Int64(offset), key: produced.key, value: produced.value, headers: produced.headers)
    }

    static func purchase(_ id: TransactionID, _ user: UserID, _ product: ProductID, quantity: Int) -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: id), userId: user, productId: product, productType: .consumable,
                       quantity: quantity, purchaseTime: now)
    }

    static let purchases = [purchase("huge-1", "alice", "coins.huge", quantity: 1000), purchase("huge-2", "alice", "coins.huge", quantity: 1),
                            purchase("small-bob", "bob", "coins.100", quantity: 1), purchase("huge-3", "alice", "coins.huge", quantity: 1000),
                            purchase("small-bob-2", "bob", "coins.100", quantity: 1)]

    static func verified(_ record: PurchaseRecord) -> PurchaseVerifiedEvent {
        PurchaseVerifiedEvent(store: record.key.store, transactionId: record.key.transactionId, productId: record.productId, productType: "consumable",
                              quantity: record.quantity, userId: record.userId, purchaseDate: now, source: .client, verifiedAt: now)
    }

    static func adjustment(_ id: AdjustmentID, _ user: UserID, _ amount: Int64) -> UserAdjustment {
        UserAdjustment(adjustmentId: id, userId: user, requestedBy: "support:ana", reason: "ticket \(id)",
                       items: [.init(kind: .currency, code: "coins", amount: amount)], requestedAt: now)
    }

    static func revoked(_ id: TransactionID, _ reason: PurchaseRevokedEvent.Reason, decided: TimeInterval) -> PurchaseRevokedEvent {
        PurchaseRevokedEvent(store: .appstore, transactionId: id, reason: reason, decidedAt: now.addingTimeInterval(decided), revokedAt: now)
    }

    /// One partition's messages, in order, and what each must come to.
    static func messages() throws -> [(KafkaMessage, String)] {
        let events: [(any PipelineEvent, String)] = [
            (adjustment("x", "bob", .min), "deadLetter schemaViolation"),
            (adjustment("y", "bob", .max), "deadLetter schemaViolation"),
            (verified(purchases[0]), "granted alice coins \(CurrencyAmounts.balanceLimit)"),
            (verified(purchases[1]), "rejected balanceOutOfRange"),
            (adjustment("z", "alice", 1), "adjusted refused amountOutOfRange"),
            (verified(purchases[2]), "granted bob coins 100"),
            (revoked("huge-1", .REFUND, decided: 1), "published 0"),
            (verified(purchases[3]), "granted alice coins \(CurrencyAmounts.balanceLimit)"),
            (revoked("huge-1", .REFUND_REVERSED, decided: 2), "deadLetter balanceOutOfRange"),
            (adjustment("w", "bob", -50), "adjusted applied"),
            (verified(purchases[4]), "granted bob coins 150"),
        ]
        return try events.enumerated().map { offset, pair in (try message(pair.0, offset: offset), pair.1) }
    }

    /// What a stage's result says, in the words of `messages()`.
    static func summary(_ result: Result<StageResult, any Error>) -> String {
        switch result {
        case .failure(let error): return "failed \(error)"
        case .success(.deadLetter(let reason, _)): return "deadLetter \(reason)"
        case .success(.recheck): return "recheck"
        case .success(.publish(let outputs)):
            guard let output = outputs.first else { return "published 0" }
            let message = KafkaMessage(topic: output.topic, partition: 0, offset: 0, key: output.key, value: output.value, headers: output.headers)
            if let granted = try? codec.decode(message, as: ItemGranted.self).get(), let item = granted.items.first {
                return "granted \(granted.userId.rawValue) \(item.code) \(item.balance.map(String.init) ?? "-")"
            }
            if let rejected = try? codec.decode(message, as: PurchaseRejectedEvent.self).get() { return "rejected \(rejected.reason)" }
            if let adjusted = try? codec.decode(message, as: UserAdjusted.self).get() {
                return "adjusted \(adjusted.outcome.rawValue)\(adjusted.refusal.map { " \($0.rawValue)" } ?? "")"
            }
            return "published \(output.topic)"
        }
    }

    @Test(arguments: StoreEngine.available) func amountsPastALimitAreRefusedAndTheGranterGoesOn(_ engine: StoreEngine) async throws {
        let messages = try Self.messages()
        for batched in [false, true] {
            let store = try SQLPurchaseStore(url: try await engine.freshURL())
            try await store.migrate()
            for record in Self.purchases { #expect(try await store.recordVerified(record, at: Self.now) == .recorded) }
            let granter = Self.granter(store)
            var results: [Result<StageResult, any Error>] = []
            if batched {
                results = await granter.handle(batch: messages.map(\.0))
            } else {
                for (message, _) in messages {
                    do { results.append(.success(try await granter.handle(message))) } catch { results.append(.failure(error)) }
                }
            }
            #expect(results.map(Self.summary) == messages.map(\.1), "\(engine), batched: \(batched)")
            #expect(try await store.balances(of: "alice") == ["coins": CurrencyAmounts.balanceLimit])
            #expect(try await store.balances(of: "bob") == ["coins": 150])
            #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "huge-2"))?.state == .verified, "refused: never granted")
            #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "huge-1"))?.state == .revoked, "its reversal refused")
            let audit = try await store.audit(listingPurchases: false)
            #expect(audit.isBalanced, "\(audit.balanceMismatches)")
            #expect(audit.currencyTotals == ["coins": CurrencyAmounts.balanceLimit + 150])
            if engine == .sqlite {
                let nonIntegers = try await store.executor.run { connection in
                    try connection.query("""
                        SELECT (SELECT count(*) FROM balances WHERE typeof(amount) <> 'integer')
                             + (SELECT count(*) FROM ledger WHERE typeof(amount) <> 'integer' OR typeof(shortfall) <> 'integer')
                        """).first?[0].int64
                }
                #expect(nonIntegers == 0, "balances and ledger amounts stay integers")
            }
        }
    }
}

import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StoreFixtures
import Testing
import TestSupport

/// Support's corrections through the broker and the granter: a compensation asked for twice is granted once, a typo is
/// refused with its reason, a reversal takes it back; each answered on `user.adjusted` and shown in the history.
extension PipelineTests {
    @Test func aCompensationRequestedTwiceIsGrantedOnceAndCanBeReversed() async throws {
        let servers = try TestServices.requireBrokers()
        let pipeline = try await Self.start(servers: servers, pki: try TestPKI.make(), storeURL: try await StoreEngine.sqlite.freshURL())
        let answers = Recorder()
        let watcher = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: uniqueName("adjusted"),
                                                                             topics: [pipeline.codec.topic(.userAdjusted)]))) { await answers.record($0) }
        func request(_ id: String, _ items: [UserAdjustment.Item]? = nil, reverses: String? = nil) throws -> KafkaProducerMessage {
            try pipeline.codec.message(UserAdjustment(adjustmentId: AdjustmentID(id), userId: "player-7", requestedBy: "support:ana",
                                                      reason: "outage compensation", items: items, reverses: reverses.map { AdjustmentID($0) },
                                                      requestedAt: Date()), time: Date())
        }
        func outcomes() async -> [String] {
            await answers.messages.compactMap { message in
                message.value.flatMap { JSONValue.parse(Array($0))?.objectValue }.map {
                    "\($0["adjustmentId"]?.stringValue ?? "?") \($0["outcome"]?.stringValue ?? "?") \($0["refusal"]?.stringValue ?? "")"
                }
            }
        }
        let coins = UserAdjustment.Item(kind: .currency, code: "coins", amount: 500)
        try await send([try request("comp-1", [coins]), try request("comp-1", [coins]),
                        try request("comp-2", [.init(kind: .currency, code: "coinz", amount: 50)])], servers: servers)
        try await waitUntil("three answers") { await answers.count == 3 }
        #expect(await outcomes() == ["comp-1 applied ", "comp-1 alreadyApplied ", "comp-2 refused unknownItem"])
        #expect(try await pipeline.store.balances(of: "player-7") == ["coins": 500], "granted once")
        let applied = try #require(await answers.messages.first?.value.flatMap { JSONValue.parse(Array($0))?.objectValue })
        #expect(applied["items"] == .array([.object(["kind": .string("currency"), "code": .string("coins"), "amount": .integer(500), "balance": .integer(500)])]))

        try await send([try request("comp-1-undo", reverses: "comp-1")], servers: servers)
        try await waitUntil("the reversal answered") { await answers.count == 4 }
        #expect(await outcomes().last == "comp-1-undo applied ")
        #expect(try await pipeline.store.balances(of: "player-7") == ["coins": 0])
        let history = try await pipeline.store.history(of: "player-7").events
        #expect(history.map { "\($0.kind.rawValue) \($0.adjustmentId?.rawValue ?? "") \($0.item?.amount ?? 0)" } == ["adjusted comp-1-undo -500", "adjusted comp-1 500"])
        try await watcher.stop()
        try await pipeline.stop()
    }
}

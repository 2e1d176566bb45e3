import Foundation
import JSON
import JSONSchema
import Kafka
import PurchaseEvents
import Testing
import TestSupport

/// `iapctl dlq list` and `replay` against the broker, as an operator would use them after a fix.
/// Each invocation joins a consumer group (about 20 s on the local broker), hence the time limit.
@Suite(TestServices.broker, .timeLimit(.minutes(5)))
struct DeadLetterCommandTests {
    @Test func listShowsDeadLettersAndReplaySendsTheOriginalsBack() async throws {
        let servers = try TestServices.requireBrokers()
        let prefix = "dlq\(UUID().uuidString.prefix(6).lowercased())."
        let source = prefix + "iap.purchase.submitted"
        #expect(try await VerifyCommandTests.run(["topics", "create", source, prefix + "iap.deadletter", "--partitions", "2", "--brokers", servers],
                                                 input: "").status == 0)
        // Two dead letters as the verifier writes them: the originals' bytes, key and headers, with the reason.
        let codec = EventCodec(schemas: EventCodecTestsSchemas.registry, source: "/test", topicPrefix: prefix)
        let originals = [
            KafkaMessage(topic: source, partition: 1, offset: 7, key: Data("u-1".utf8), value: Data("{\"truncated\": ".utf8),
                         headers: [KafkaHeader(key: "ce_id", string: "a-1"), KafkaHeader(key: "trace", value: nil)]),
            KafkaMessage(topic: source, partition: 0, offset: 3, key: Data("u-2".utf8), value: Data("{}".utf8), headers: []),
        ]
        let publisher = EventPublisher(codec: codec, producer: try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers]))))
        try await publisher.publish(DeadLetter(reason: "invalidJSON", detail: "value is not JSON", stage: "verifier", message: originals[0], failedAt: Date()))
        try await publisher.publish(DeadLetter(reason: "missingCloudEventsHeaders", detail: "ce_id missing", stage: "verifier", message: originals[1],
                                               failedAt: Date()))
        await publisher.shutdown()

        let list = try await VerifyCommandTests.run(["dlq", "list", "--topic-prefix", prefix, "--brokers", servers], input: "")
        #expect(list.status == 0)
        let entries = list.lines.compactMap { JSONValue.parse(Array($0.utf8))?.objectValue }
        #expect(entries.compactMap { $0["reason"]?.stringValue }.sorted() == ["invalidJSON", "missingCloudEventsHeaders"])
        #expect(entries.first { $0["reason"] == .string("invalidJSON") }?["sourceOffset"] == .integer(7))

        let dry = try await VerifyCommandTests.run(["dlq", "replay", "--reason", "invalidJSON", "--since", RFC3339.format(Date().addingTimeInterval(-3600)),
                                                    "--dry-run", "--topic-prefix", prefix, "--brokers", servers], input: "")
        #expect(dry.lines.last == "would replay 1 of 1", "filtered by reason and failure time")
        let replay = try await VerifyCommandTests.run(["dlq", "replay", "--reason", "invalidJSON", "--topic-prefix", prefix, "--brokers", servers], input: "")
        #expect(replay.status == 0)
        #expect(replay.lines.last == "replayed 1 of 1, failed 0")

        let tail = try await VerifyCommandTests.run(["tail", "--topic", source, "--from-beginning", "--max", "1", "--timeout", "60", "--brokers", servers], input: "")
        let replayed = try #require(tail.lines.first.flatMap { JSONValue.parse(Array($0.utf8))?.objectValue })
        #expect(replayed["value"] == .string("base64:" + Data("{\"truncated\": ".utf8).base64EncodedString()), "the original bytes, not JSON")
        #expect(replayed["key"] == .string("u-1"))
        #expect(replayed["headers"]?.objectValue == ["ce_id": .string("a-1"), "trace": .null], "headers kept, a null one too")
    }
}

enum EventCodecTestsSchemas {
    static let registry = try! JSONSchemaRegistry(directory: TestServices.packageRoot.appendingPathComponent("schemas"))
}

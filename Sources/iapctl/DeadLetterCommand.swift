import CommandLineOptions
import Foundation
import JSON
import JSONSchema
import Kafka
import PurchaseEvents
import Synchronization

/// `iapctl dlq list|replay [--reason R] [--since TIME] [--topic-prefix P]`: the dead-letter topic for operators.
///
/// `list` prints every dead letter (reason, detail, stage, source topic/partition/offset, key, header names,
/// size, time) as one JSON line. `replay` re-publishes the selected ones' original key, value and headers to
/// their source topic, after the cause was fixed; the pipeline's idempotency makes a replayed purchase grant
/// at most once. Both read the topic from its beginning to its current end, then stop.
enum DeadLetterCommand {
    static func run(_ arguments: [String]) async throws -> Int32 {
        guard let action = arguments.first, ["list", "replay"].contains(action) else { throw UsageError("dlq: expected list or replay") }
        let options = try CommandOptions(Array(arguments.dropFirst()), valued: ["--reason", "--since", "--topic-prefix", "--brokers", "--kafka"],
                                         flags: ["--dry-run"])
        let since = try options.string("--since").map { text -> Date in
            guard let date = RFC3339.parse(text) else { throw UsageError("--since must be an RFC 3339 time, got '\(text)'") }
            return date
        }
        let reason = options.string("--reason")
        let kafka = try options.kafkaConfiguration()
        let codec = EventCodec(schemas: try JSONSchemaRegistry.eventSchemas(), source: "/iapctl/dlq", topicPrefix: options.string("--topic-prefix") ?? "")
        let letters = try await readAll(kafka: kafka, codec: codec).filter { letter in
            (reason == nil || letter.letter.reason == reason) && (since == nil || letter.letter.failedAt >= since!)
        }
        if action == "list" {
            for (message, letter) in letters { print(summary(letter, at: message).serializedText) }
            return 0
        }
        var replayable: [KafkaProducerMessage] = []
        for (message, letter) in letters {
            guard let value = letter.value.flatMap({ Data(base64Encoded: $0) }), letter.valueTruncated != true else {
                FileHandle.standardError.write(Data("skipped \(message.topic)[\(message.partition)]@\(message.offset): \(letter.value == nil ? "a tombstone" : "value truncated (over 256 KiB)"), nothing to replay\n".utf8))
                continue
            }
            let headers = letter.headers.map { KafkaHeader(key: $0.key, value: $0.value.flatMap { Data(base64Encoded: $0) }) }
            replayable.append(KafkaProducerMessage(topic: letter.sourceTopic, key: letter.key.flatMap { Data(base64Encoded: $0) }, value: value, headers: headers))
        }
        if options.flags.contains("--dry-run") {
            print("would replay \(replayable.count) of \(letters.count)")
            return 0
        }
        let producer = try KafkaProducer(configuration: .init(kafka: kafka))
        var failed = 0
        for result in await producer.send(contentsOf: replayable) {
            if case .failure(let error) = result {
                failed += 1
                FileHandle.standardError.write(Data("not acknowledged: \(error)\n".utf8))
            }
        }
        await producer.shutdown()
        print("replayed \(replayable.count - failed) of \(letters.count), failed \(failed)")
        return failed == 0 ? 0 : 1
    }

    /// Every dead letter now on the topic, read from the beginning up to the high watermarks taken at the start.
    static func readAll(kafka: KafkaConfiguration, codec: EventCodec) async throws -> [(message: KafkaMessage, letter: DeadLetter)] {
        let topic = codec.topic(.deadLetter)
        guard let partitionCount = try await KafkaAdmin(kafka: kafka).metadata().topics[topic] else { throw UsageError("dlq: no topic \(topic)") }
        var reading = kafka
        reading["auto.offset.reset"] = "earliest"
        reading["enable.auto.commit"] = "false"
        let consumer = try KafkaConsumer(configuration: .init(kafka: reading, groupID: "iapctl-dlq-\(UUID().uuidString.prefix(8))", topics: [topic]))
        var remaining: [Int32: Int64] = [:] // partition → the last offset to read
        for partition in 0..<Int32(partitionCount) {
            let marks = try consumer.watermarks(TopicPartition(topic: topic, partition: partition))
            if marks.high > marks.low { remaining[partition] = marks.high - 1 }
        }
        guard !remaining.isEmpty else { return [] }
        let state = Mutex<(remaining: [Int32: Int64], letters: [(KafkaMessage, DeadLetter)])>((remaining, []))
        try await consumer.run { message in
            let done = state.withLock { state -> Bool in
                if case .success(let letter) = codec.decode(message, as: DeadLetter.self) { state.letters.append((message, letter)) }
                if let last = state.remaining[message.partition], message.offset >= last { state.remaining[message.partition] = nil }
                return state.remaining.isEmpty
            }
            if done { consumer.triggerGracefulShutdown() }
        }
        return state.withLock { $0.letters }.sorted { ($0.1.failedAt, $0.0.partition, $0.0.offset) < ($1.1.failedAt, $1.0.partition, $1.0.offset) }
    }

    static func summary(_ letter: DeadLetter, at message: KafkaMessage) -> JSONValue {
        .object([
            "reason": .string(letter.reason), "detail": .string(letter.detail), "stage": .string(letter.stage),
            "sourceTopic": .string(letter.sourceTopic), "sourcePartition": .integer(letter.sourcePartition), "sourceOffset": .integer(letter.sourceOffset),
            "key": letter.key.flatMap { Data(base64Encoded: $0) }.map { .string(String(decoding: $0, as: UTF8.self)) } ?? .null,
            "headers": .array(letter.headers.map { .string($0.key) }), "valueBytes": letter.valueBytes.map(JSONValue.integer) ?? .null,
            "failedAt": .string(RFC3339.format(letter.failedAt)), "deadLetterOffset": .integer(message.offset),
        ])
    }
}

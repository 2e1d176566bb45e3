import CommandLineOptions
import Foundation
import JSON
import JSONSchema
import Kafka
import PurchaseEvents

/// `iap-harness bench codec`: what each stage pays per message to read and write the pipeline's events, in one
/// process on one thread, away from the pipeline's noise: decoding a message (headers, parse, schema, typed model) and
/// making the message of an event (encode, headers, bytes), for the events of a purchase's walk, from the schemas'
/// own examples, as Kafka messages with their CloudEvents headers. Beside each, `JSONSerialization` parsing the same bytes, measured in the same rounds: the figures
/// of two runs compare through that ratio, as this shared machine's speed drifts.
enum BenchCodecCommand {
    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--rounds"], flags: ["--json"])
        let rounds = try options.int("--rounds") ?? 5
        guard rounds >= 1 else { throw UsageError("--rounds must be positive") }
        let schemas = try JSONSchemaRegistry.eventSchemas()
        guard let directory = schemas.directory else { throw UsageError("the schemas' directory is unknown: set IAP_SCHEMAS_DIR") }
        let codec = EventCodec(schemas: schemas, source: "/iap-pipeline/bench")
        let cases = [
            try Case(PurchaseSubmitted.self, example: "purchase.submitted.appstore", directory: directory, codec: codec),
            try Case(PurchaseVerifiedEvent.self, example: "purchase.verified", directory: directory, codec: codec),
            try Case(ItemGranted.self, example: "item.granted", directory: directory, codec: codec),
            try Case(TransactionFinished.self, example: "transaction.finished", directory: directory, codec: codec),
        ]
        var rows: [JSONValue] = []
        for benchCase in cases {
            // Interleaved rounds of the three, so that a drift of the machine's speed hits them alike; medians.
            var decode: [Double] = [], encode: [Double] = [], foundation: [Double] = []
            for _ in 0..<rounds {
                decode.append(measure(benchCase.decode))
                encode.append(measure(benchCase.encode))
                foundation.append(measure(benchCase.foundationParse))
            }
            let (decodeNs, encodeNs, foundationNs) = (median(decode), median(encode), median(foundation))
            rows.append(.object([
                "event": .string(benchCase.name), "bytes": .integer(Int64(benchCase.body.count)),
                "decodeMicroseconds": .number(thousandths(decodeNs / 1000)), "encodeMicroseconds": .number(thousandths(encodeNs / 1000)),
                "foundationParseMicroseconds": .number(thousandths(foundationNs / 1000)),
                "decodeToFoundationParse": .number(thousandths(decodeNs / foundationNs)), "encodeToFoundationParse": .number(thousandths(encodeNs / foundationNs)),
            ]))
            if !options.flags.contains("--json") {
                print(String(format: "%@ %5d bytes  decode %6.1f µs  encode %6.1f µs  JSONSerialization parse %6.1f µs  (decode %.2f ×, encode %.2f ×)",
                             benchCase.name.padding(toLength: 22, withPad: " ", startingAt: 0), benchCase.body.count, decodeNs / 1000, encodeNs / 1000, foundationNs / 1000,
                             decodeNs / foundationNs, encodeNs / foundationNs))
            }
        }
        if options.flags.contains("--json") { print(JSONValue.object(["rounds": .integer(Int64(rounds)), "events": .array(rows)]).serializedText) }
        return 0
    }

    /// One event type's example, and the three operations timed on it.
    private struct Case {
        let name: String
        let body: Data
        let decode: () -> Void
        let encode: () -> Void
        let foundationParse: () -> Void

        init<Event: PipelineEvent>(_ type: Event.Type, example: String, directory: String, codec: EventCodec) throws {
            let file = URL(fileURLWithPath: directory).appendingPathComponent("examples/\(example).json")
            guard let text = FileManager.default.contents(atPath: file.path), let parsed = JSONValue.parse(text) else {
                throw UsageError("cannot read \(file.path)")
            }
            // The body as a producer writes it: compact, as it travels.
            let body = Data(parsed.serialized)
            let event: Event
            switch codec.decodeBody(body, as: Event.self) {
            case .success(let decoded): event = decoded
            case .failure(let invalid): throw UsageError("\(example) does not decode: \(invalid)")
            }
            let time = Date()
            let produced = try codec.message(event, time: time)
            // The message as a consumer receives it: what was produced, headers and all.
            let message = KafkaMessage(topic: produced.topic, partition: 0, offset: 0, key: produced.key, value: body, headers: produced.headers)
            name = Event.type.rawValue
            self.body = body
            decode = { _ = codec.decode(message, as: Event.self) }
            encode = { _ = try? codec.message(event, time: time) }
            foundationParse = { _ = try? JSONSerialization.jsonObject(with: body) }
        }
    }

    /// Nanoseconds per call of `body`, over about 0.2 s.
    private static func measure(_ body: () -> Void) -> Double { 1e9 / BenchVerifyCommand.measure(seconds: 0.2, body) }
    private static func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
}

import Foundation
import JSONSchema
import Kafka
import PurchaseDomain
import PurchaseEvents
import Testing
import WorkerRuntime

/// What tests of the stages share, with a broker or without: the event schemas and a codec, the example catalog, and
/// messages as a stage's consumer hands them over.
public enum StageFixtures {
    /// The package's root directory (for schemas/).
    public static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    public static let schemas = try! JSONSchemaRegistry(directory: packageRoot.appendingPathComponent("schemas"))
    /// schemas/examples/catalog.json: coin packs, ad-free, the monthly pass (a subscription) and the season pass.
    public static let catalog = try! ProductCatalog(contentsOf: packageRoot.appendingPathComponent("schemas/examples/catalog.json"), schemas: schemas)
    /// The App Store app the test data is signed for.
    public static let bundle = "com.example.coins"
    public static let bundleID = BundleID(bundle)
    public static let codec = EventCodec(schemas: schemas, source: "/test")

    /// `event` as a stage's consumer hands it over: at `offset` of partition 0, produced at `time`.
    public static func message(_ event: some PipelineEvent, codec: EventCodec = codec, offset: Int64 = 0, at time: Date = Date()) throws -> KafkaMessage {
        let produced = try codec.message(event, time: time)
        return KafkaMessage(topic: produced.topic, partition: 0, offset: offset, key: produced.key, value: produced.value, headers: produced.headers)
    }

    /// The events of `type` among what `result` publishes, in order (none for a dead letter).
    public static func published<Event: PipelineEvent>(_ result: StageResult?, as type: Event.Type, codec: EventCodec = codec) -> [Event] {
        let messages: [KafkaProducerMessage]
        switch result {
        case .publish(let out)?, .recheck(let out, _)?: messages = out
        case .deadLetter?, nil: return []
        }
        // An event on the topic that does not decode is the stage's error, recorded: never an event quietly left out.
        return messages.filter { $0.topic == codec.topic(Event.type) }.compactMap { message in
            switch message.value.map({ codec.decodeBody($0, as: type) }) {
            case .success(let event)?: return event
            case .failure(let invalid)?:
                Issue.record("a \(Event.type) the stage published does not decode: \(invalid)")
                return nil
            case nil:
                Issue.record("a \(Event.type) the stage published has no value")
                return nil
            }
        }
    }
}

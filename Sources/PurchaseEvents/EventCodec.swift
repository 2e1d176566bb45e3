import Crypto
import Foundation
import JSON
import JSONSchema
import Kafka

/// Hex SHA-256, for ids derived from content.
enum ContentHash {
    static func hex(_ text: String) -> String { hex(Data(text.utf8)) }
    static func hex(_ data: Data) -> String { sha256(data).lowercaseHex }
}

/// Turns events into Kafka messages with CloudEvents 1.0 binary-mode headers, and Kafka messages back
/// into events, checking everything a stage must not trust: size, UTF-8, JSON, the schema, the headers.
public struct EventCodec: Sendable {
    /// Messages larger than this are not processed (dead-lettered as `oversized`).
    public static let maxMessageBytes = 1024 * 1024

    public let schemas: JSONSchemaRegistry
    /// `ce_source` of the events this process writes, e.g. `/iap-pipeline/verifier`.
    public let source: String
    /// Prepended to every topic name (e.g. `staging.`), so that several pipelines can share a cluster.
    public let topicPrefix: String

    /// Each event type by its topic in this deployment.
    private let eventTypes: [String: EventType]
    /// The headers every message of an event type carries, made once: before, between and after its `ce_id` and `ce_time`.
    private let constantHeaders: [EventType: ConstantHeaders]
    private typealias ConstantHeaders = (leading: KafkaHeader, middle: [KafkaHeader], trailing: [KafkaHeader])

    public init(schemas: JSONSchemaRegistry, source: String, topicPrefix: String = "") {
        self.schemas = schemas
        self.source = source
        self.topicPrefix = topicPrefix
        eventTypes = Dictionary(uniqueKeysWithValues: EventType.allCases.map { (topicPrefix + $0.topic, $0) })
        constantHeaders = Dictionary(uniqueKeysWithValues: EventType.allCases.map { ($0, Self.constantHeaders($0, source: source)) })
    }

    private static func constantHeaders(_ type: EventType, source: String) -> ConstantHeaders {
        (KafkaHeader(key: "ce_specversion", string: "1.0"), [KafkaHeader(key: "ce_type", string: type.ceType), KafkaHeader(key: "ce_source", string: source)],
         [KafkaHeader(key: "ce_dataschema", string: type.schemaID), KafkaHeader(key: "content-type", string: "application/json")])
    }

    /// The topic of an event type in this deployment.
    public func topic(_ type: EventType) -> String { topicPrefix + type.topic }

    /// The event type whose topic `topic` is in this deployment (nil: not one of the pipeline's event topics): what a
    /// stage routes a message by.
    public func eventType(ofTopic topic: String) -> EventType? { eventTypes[topic] }

    /// Where stages park what failed for longer than their retry budget (original records, with their origin).
    public var retryTopic: String { topicPrefix + Self.retryTopicName }
    public static let retryTopicName = "iap.retry"

    /// Every topic of the pipeline: one per event type, and the retry topic.
    public var pipelineTopics: [String] { Self.pipelineTopics(prefix: topicPrefix) }
    public static func pipelineTopics(prefix: String) -> [String] { EventType.allCases.map { prefix + $0.topic } + [prefix + retryTopicName] }

    /// The message for `event` on `topic` (default: the event type's topic).
    public func message<Event: PipelineEvent>(_ event: Event, topic: String? = nil, time: Date) throws -> KafkaProducerMessage {
        message(event, body: try Self.json(event), topic: topic, time: time)
    }

    /// The message for `event`, or `nil` if what it would say does not conform to its type's schema. For events built
    /// from what a store said (ids, product ids), which the next stage would refuse: checked on the value about to be
    /// written, not parsed back.
    public func conformingMessage<Event: PipelineEvent>(_ event: Event, time: Date) throws -> KafkaProducerMessage? {
        let body = try Self.json(event)
        guard schemas.validate(body, against: Event.type.schemaID).isEmpty else { return nil }
        return message(event, body: body, topic: nil, time: time)
    }

    private func message<Event: PipelineEvent>(_ event: Event, body: JSONValue, topic: String?, time: Date) -> KafkaProducerMessage {
        let constant = constantHeaders[Event.type] ?? Self.constantHeaders(Event.type, source: source)
        var headers: [KafkaHeader] = []
        headers.reserveCapacity(7)
        headers.append(constant.leading)
        headers.append(KafkaHeader(key: "ce_id", string: event.eventID))
        headers += constant.middle
        headers.append(KafkaHeader(key: "ce_time", string: RFC3339.format(time)))
        headers += constant.trailing
        return KafkaProducerMessage(topic: topic ?? self.topic(Event.type), key: event.messageKey, value: Data(body.serialized), headers: headers)
    }

    /// An event as the pipeline writes it: the JSON value of its `Codable` form, dates in RFC 3339.
    public static func json(_ event: some Encodable) throws -> JSONValue { try JSONValueEncoder().encode(event) }

    /// Why a message could not be turned into an event. Each becomes a dead letter with this reason.
    public struct Invalid: Error, Sendable, CustomStringConvertible {
        public let reason: String
        public let detail: String
        public var description: String { "\(reason): \(detail)" }

        public init(reason: String, detail: String) {
            self.reason = reason
            self.detail = detail
        }
    }

    /// Decodes and validates a consumed message as `Event`.
    public func decode<Event: PipelineEvent>(_ message: KafkaMessage, as: Event.Type) -> Result<Event, Invalid> {
        checkedHeaders(message, as: Event.type).flatMap { decodeBody($0, as: Event.self) }
    }

    /// A consumed message of `type` checked as `decode` checks it (CloudEvents headers, body within its schema) without
    /// making its typed model: its body as parsed, for what reads a field or two of it and passes the bytes on.
    public func validated(_ message: KafkaMessage, as type: EventType) -> Result<JSONValue, Invalid> {
        checkedHeaders(message, as: type).flatMap { value in
            parsed(value).flatMap { json in
                let violations = schemas.validate(json, against: type.schemaID)
                return violations.isEmpty ? .success(json) : .failure(Self.schemaViolation(violations))
            }
        }
    }

    /// The message's value when its CloudEvents headers say it is an event of `type`.
    private func checkedHeaders(_ message: KafkaMessage, as type: EventType) -> Result<Data, Invalid> {
        guard let value = message.value else { return .failure(Invalid(reason: "tombstone", detail: "message has no value")) }
        guard value.count <= Self.maxMessageBytes else {
            return .failure(Invalid(reason: "oversized", detail: "\(value.count) bytes, limit \(Self.maxMessageBytes)"))
        }
        guard message.header("ce_specversion") == "1.0", let id = message.header("ce_id"), !id.isEmpty, message.header("ce_source") != nil else {
            return .failure(Invalid(reason: "missingCloudEventsHeaders", detail: "ce_specversion 1.0, ce_id and ce_source are required"))
        }
        guard message.header("ce_type") == type.ceType else {
            return .failure(Invalid(reason: "wrongEventType", detail: "ce_type '\(message.header("ce_type") ?? "")', expected \(type.ceType)"))
        }
        return .success(value)
    }

    /// Decodes and validates a message body (JSON, without the Kafka headers) as `Event`: UTF-8, JSON at most
    /// 128 levels deep, the event's schema, then the typed model from the value parsed once.
    public func decodeBody<Event: PipelineEvent>(_ value: Data, as: Event.Type) -> Result<Event, Invalid> {
        parsed(value).flatMap { decode($0, as: Event.self) }
    }

    /// `value` parsed: UTF-8 JSON at most 128 levels deep.
    private func parsed(_ value: Data) -> Result<JSONValue, Invalid> {
        switch JSONValue.parseDocument(value) {
        case .success(let parsed): return .success(parsed)
        case .failure(let error):
            // A document the parser accepts is UTF-8 (it checks every string it reads, and takes only ASCII outside
            // them): the bytes are checked as a whole only to say why one was refused.
            guard String(validating: value, as: UTF8.self) != nil else { return .failure(Invalid(reason: "invalidUTF8", detail: "value is not UTF-8")) }
            return .failure(Invalid(reason: error.reason, detail: "value: \(error)"))
        }
    }

    private static func schemaViolation(_ violations: [JSONSchemaRegistry.Violation]) -> Invalid {
        Invalid(reason: "schemaViolation", detail: violations.prefix(5).map(\.description).joined(separator: "; "))
    }

    /// Validates a parsed body against `Event`'s schema, then decodes the typed model from it.
    public func decode<Event: PipelineEvent>(_ json: JSONValue, as: Event.Type) -> Result<Event, Invalid> {
        let violations = schemas.validate(json, against: Event.type.schemaID)
        guard violations.isEmpty else { return .failure(Self.schemaViolation(violations)) }
        do {
            return .success(try JSONValueDecoder().decode(Event.self, from: json))
        } catch {
            return .failure(Invalid(reason: "undecodable", detail: "\(error)".prefix(500).description))
        }
    }
}

extension JSONSchemaRegistry {
    /// The event schemas: from `directory`, else `IAP_SCHEMAS_DIR`, else `schemas/` next to the package the
    /// executable was built in (`.build/<config>/…`), else the working directory, else
    /// `/usr/share/iap-pipeline/schemas` (where the container image puts them).
    public static func eventSchemas(directory: String? = nil, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> JSONSchemaRegistry {
        var candidates: [URL] = []
        if let directory { candidates.append(URL(fileURLWithPath: directory)) }
        if let fromEnvironment = environment["IAP_SCHEMAS_DIR"] { candidates.append(URL(fileURLWithPath: fromEnvironment)) }
        let executable = URL(fileURLWithPath: CommandLine.arguments.first ?? "").resolvingSymlinksInPath()
        candidates.append(executable.deletingLastPathComponent().appendingPathComponent("../../../schemas").standardizedFileURL)
        candidates.append(executable.deletingLastPathComponent().appendingPathComponent("../../schemas").standardizedFileURL)
        candidates.append(URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent("schemas"))
        candidates.append(URL(fileURLWithPath: "/usr/share/iap-pipeline/schemas"))
        for candidate in candidates where FileManager.default.fileExists(atPath: candidate.appendingPathComponent("common.v1.schema.json").path) {
            return try JSONSchemaRegistry(directory: candidate)
        }
        throw JSONSchemaRegistry.SchemaError(description: "event schemas not found; set IAP_SCHEMAS_DIR (looked in \(candidates.map(\.path).joined(separator: ", ")))")
    }
}

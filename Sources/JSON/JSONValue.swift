import Foundation

/// A decoded JSON value. Decoded store payloads keep every field as one of these, so fields and
/// enum values a store adds later are carried along instead of failing the decode.
public enum JSONValue: Sendable, Hashable, Codable {
    case string(String)
    case number(Double)
    case integer(Int64)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([String: JSONValue])

    /// Parses a JSON document (RFC 8259, UTF-8); `nil` for anything that is not valid JSON, names a key twice in
    /// an object, or nests deeper than `maxDepth`.
    public static func parse(_ data: some Collection<UInt8>, maxDepth: Int = 128) -> JSONValue? {
        try? parseDocument(data, maxDepth: maxDepth).get()
    }

    /// Parses a JSON document, or says why it is not accepted.
    /// - Parameters:
    ///   - maxValues: the most values (objects, arrays, strings, numbers, literals) the result may hold; more is
    ///     `tooManyValues`, found before they are all built.
    ///   - keeping: when the document is an object, the names of the members it keeps; the others are checked to be
    ///     JSON (grammar, nesting, strings) and dropped unbuilt, however many values they hold, and are not compared
    ///     with other members of their names. Nil keeps every member.
    public static func parseDocument(_ data: some Collection<UInt8>, maxDepth: Int = 128, maxValues: Int = .max,
                                     keeping: Set<String>? = nil) -> Result<JSONValue, JSONParseError> {
        var bytes = Array(data)
        return bytes.withUnsafeMutableBufferPointer { buffer in
            var parser = JSONParser(bytes: UnsafeBufferPointer(buffer), maxDepth: maxDepth, maxValues: maxValues)
            if let value = parser.parseDocument(keeping: keeping) { return .success(value) }
            return .failure(parser.failure ?? .malformed(offset: min(parser.index, buffer.count)))
        }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let bool = try? container.decode(Bool.self) { self = .bool(bool) }
        else if let integer = try? container.decode(Int64.self) { self = .integer(integer) }
        else if let number = try? container.decode(Double.self) { self = .number(number) }
        else if let string = try? container.decode(String.self) { self = .string(string) }
        else if let array = try? container.decode([JSONValue].self) { self = .array(array) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        case .null: try container.encodeNil()
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    public var objectValue: [String: JSONValue]? { if case .object(let value) = self { value } else { nil } }
    public var stringValue: String? { if case .string(let value) = self { value } else { nil } }
    public var arrayValue: [JSONValue]? { if case .array(let value) = self { value } else { nil } }
    public var int64Value: Int64? {
        switch self {
        case .integer(let value): value
        case .number(let value): Int64(exactly: value)
        default: nil
        }
    }
    public var boolValue: Bool? { if case .bool(let value) = self { value } else { nil } }
}

import Foundation

/// Decodes `Decodable` types from a `JSONValue` that is already parsed (and, in the pipeline, validated), so that a
/// message is read once instead of being parsed again by `JSONDecoder`. `Date`s are RFC 3339 strings. Integers must be
/// exact and in range; a string is never taken for a number or the reverse.
public struct JSONValueDecoder: Sendable {
    public init() {}

    public func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try ValueDecoder(value: value, parentPath: [], key: nil).decodeAny(T.self)
    }
}

/// The decoder for one value. Its coding path is kept as the parent's path and its own key, and only joined when asked
/// for (in errors, or by a nested container), so that decoding a field allocates no path.
private struct ValueDecoder: Decoder, SingleValueDecodingContainer {
    let value: JSONValue
    let parentPath: [any CodingKey]
    let key: (any CodingKey)?

    var codingPath: [any CodingKey] { key.map { parentPath + [$0] } ?? parentPath }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else { throw mismatch([String: JSONValue].self, value, codingPath) }
        return KeyedDecodingContainer(KeyedContainer<Key>(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else { throw mismatch([JSONValue].self, value, codingPath) }
        return UnkeyedContainer(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    func decodeAny<T: Decodable>(_ type: T.Type) throws -> T {
        if T.self == Date.self {
            guard case .string(let text) = value else { throw mismatch(String.self, value, codingPath) }
            guard let date = RFC3339.parse(text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "not an RFC 3339 date-time: \(text)"))
            }
            return date as! T // swiftlint:disable:this force_cast — T is Date
        }
        if T.self == JSONValue.self { return value as! T } // swiftlint:disable:this force_cast — T is JSONValue
        return try T(from: self)
    }

    // SingleValueDecodingContainer
    func decodeNil() -> Bool { value == .null }
    func decode(_ type: Bool.Type) throws -> Bool { try JSONValueDecoding.bool(value, codingPath) }
    func decode(_ type: String.Type) throws -> String { try JSONValueDecoding.string(value, codingPath) }
    func decode(_ type: Double.Type) throws -> Double { try JSONValueDecoding.double(value, codingPath) }
    func decode(_ type: Float.Type) throws -> Float { Float(try JSONValueDecoding.double(value, codingPath)) }
    func decode(_ type: Int.Type) throws -> Int { try JSONValueDecoding.integer(value, codingPath) }
    func decode(_ type: Int8.Type) throws -> Int8 { try JSONValueDecoding.integer(value, codingPath) }
    func decode(_ type: Int16.Type) throws -> Int16 { try JSONValueDecoding.integer(value, codingPath) }
    func decode(_ type: Int32.Type) throws -> Int32 { try JSONValueDecoding.integer(value, codingPath) }
    func decode(_ type: Int64.Type) throws -> Int64 { try JSONValueDecoding.integer(value, codingPath) }
    func decode(_ type: UInt.Type) throws -> UInt { try JSONValueDecoding.integer(value, codingPath) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try JSONValueDecoding.integer(value, codingPath) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try JSONValueDecoding.integer(value, codingPath) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try JSONValueDecoding.integer(value, codingPath) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try JSONValueDecoding.integer(value, codingPath) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeAny(T.self) }
}

private struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [String: JSONValue]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { members.keys.compactMap(Key.init(stringValue:)) }
    func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

    private func member(_ key: Key) throws -> JSONValue {
        guard let value = members[key.stringValue] else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no value for '\(key.stringValue)'"))
        }
        return value
    }
    private func path(_ key: Key) -> [any CodingKey] { codingPath + [key] }

    func decodeNil(forKey key: Key) throws -> Bool { try member(key) == .null }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try bool(member(key), key) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try string(member(key), key) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try JSONValueDecoding.double(member(key), path(key)) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { Float(try JSONValueDecoding.double(member(key), path(key))) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try integer(member(key), key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try integer(member(key), key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try integer(member(key), key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try integer(member(key), key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try integer(member(key), key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try integer(member(key), key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try integer(member(key), key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try integer(member(key), key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try integer(member(key), key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try integer(member(key), key) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try ValueDecoder(value: member(key), parentPath: codingPath, key: key).decodeAny(T.self)
    }

    // Optional members in one lookup: the protocol's own `decodeIfPresent` asks `contains`, then `decodeNil`, then
    // `decode`, hashing the key three times (events have many optional members).
    private func present(_ key: Key) -> JSONValue? {
        guard let value = members[key.stringValue], value != .null else { return nil }
        return value
    }
    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? { try present(key).map { try string($0, key) } }
    func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? { try present(key).map { try bool($0, key) } }
    func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? { try present(key).map { try integer($0, key) } }
    func decodeIfPresent(_ type: Int64.Type, forKey key: Key) throws -> Int64? { try present(key).map { try integer($0, key) } }
    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        try present(key).map { try ValueDecoder(value: $0, parentPath: codingPath, key: key).decodeAny(T.self) }
    }

    // The common cases without building the path: only an error needs it.
    private func string(_ value: JSONValue, _ key: Key) throws -> String {
        if case .string(let text) = value { return text }
        return try JSONValueDecoding.string(value, path(key))
    }
    private func bool(_ value: JSONValue, _ key: Key) throws -> Bool {
        if case .bool(let bool) = value { return bool }
        return try JSONValueDecoding.bool(value, path(key))
    }
    private func integer<I: FixedWidthInteger>(_ value: JSONValue, _ key: Key) throws -> I {
        if case .integer(let integer) = value, let exact = I(exactly: integer) { return exact }
        return try JSONValueDecoding.integer(value, path(key))
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try ValueDecoder(value: member(key), parentPath: codingPath, key: key).container(keyedBy: type)
    }
    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ValueDecoder(value: member(key), parentPath: codingPath, key: key).unkeyedContainer()
    }
    /// The member `super`, where `superEncoder()` puts what a superclass encodes (as Foundation does).
    func superDecoder() throws -> any Decoder {
        ValueDecoder(value: members["super"] ?? .null, parentPath: codingPath, key: JSONValueDecoding.NameKey("super"))
    }
    func superDecoder(forKey key: Key) throws -> any Decoder {
        ValueDecoder(value: members[key.stringValue] ?? .null, parentPath: codingPath, key: key)
    }
}

private struct UnkeyedContainer: UnkeyedDecodingContainer {
    let elements: [JSONValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(elements: [JSONValue], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    private mutating func next<T>(_ type: T.Type) throws -> ValueDecoder {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(T.self, .init(codingPath: codingPath, debugDescription: "no element \(currentIndex)"))
        }
        defer { currentIndex += 1 }
        return ValueDecoder(value: elements[currentIndex], parentPath: codingPath, key: JSONValueDecoding.IndexKey(currentIndex))
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, elements[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }
    mutating func decode(_ type: Bool.Type) throws -> Bool { try next(type).decode(type) }
    mutating func decode(_ type: String.Type) throws -> String { try next(type).decode(type) }
    mutating func decode(_ type: Double.Type) throws -> Double { try next(type).decode(type) }
    mutating func decode(_ type: Float.Type) throws -> Float { try next(type).decode(type) }
    mutating func decode(_ type: Int.Type) throws -> Int { try next(type).decode(type) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try next(type).decode(type) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try next(type).decode(type) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try next(type).decode(type) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try next(type).decode(type) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try next(type).decode(type) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next(type).decode(type) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next(type).decode(type) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next(type).decode(type) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next(type).decode(type) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next(type).decodeAny(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next([String: JSONValue].self).container(keyedBy: type)
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next([JSONValue].self).unkeyedContainer() }
    mutating func superDecoder() throws -> any Decoder { try next(JSONValue.self) }
}

/// The conversions the containers share, with the errors `JSONDecoder` would give.
enum JSONValueDecoding {
    struct IndexKey: CodingKey {
        let intValue: Int?
        let stringValue: String
        init(_ index: Int) { (intValue, stringValue) = (index, "Index \(index)") }
        init?(stringValue: String) { nil }
        init?(intValue: Int) { self.init(intValue) }
    }

    struct NameKey: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(_ name: String) { stringValue = name }
        init?(stringValue: String) { self.init(stringValue) }
        init?(intValue: Int) { nil }
    }

    static func bool(_ value: JSONValue, _ path: [any CodingKey]) throws -> Bool {
        guard case .bool(let bool) = value else { throw mismatch(Bool.self, value, path) }
        return bool
    }

    static func string(_ value: JSONValue, _ path: [any CodingKey]) throws -> String {
        guard case .string(let text) = value else { throw mismatch(String.self, value, path) }
        return text
    }

    static func double(_ value: JSONValue, _ path: [any CodingKey]) throws -> Double {
        switch value {
        case .number(let number): return number
        case .integer(let integer): return Double(integer)
        default: throw mismatch(Double.self, value, path)
        }
    }

    static func integer<I: FixedWidthInteger>(_ value: JSONValue, _ path: [any CodingKey]) throws -> I {
        let exact: I?
        switch value {
        case .integer(let integer): exact = I(exactly: integer)
        case .number(let number): exact = I(exactly: number)
        default: throw mismatch(I.self, value, path)
        }
        guard let exact else {
            throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: "number \(value) does not fit in \(I.self)"))
        }
        return exact
    }
}

private func mismatch(_ type: Any.Type, _ value: JSONValue, _ path: [any CodingKey]) -> DecodingError {
    let found = switch value {
    case .string: "a string"
    case .number, .integer: "a number"
    case .bool: "a boolean"
    case .null: "null"
    case .array: "an array"
    case .object: "an object"
    }
    return DecodingError.typeMismatch(type, .init(codingPath: path, debugDescription: "expected \(type), found \(found)"))
}

import Foundation

/// Encodes `Encodable` values to a `JSONValue`, which `serialized` then writes as bytes. A stage can so check an event
/// it wrote against its schema without parsing it back, and write it without `JSONEncoder`. `Date`s become RFC 3339
/// strings; `nil` optionals are left out, as the synthesized conformances ask.
public struct JSONValueEncoder: Sendable {
    public init() {}

    public func encode<T: Encodable>(_ value: T) throws -> JSONValue {
        try ValueEncoder.encode(value, path: [])
    }
}

/// Where a container writes: an object or an array that a nested container can still add to after its parent has
/// moved on (as `nestedContainer` allows), resolved to a `JSONValue` at the end.
private final class EncodedNode {
    enum Content {
        case empty
        case value(JSONValue)
        case object([String: JSONValue], nested: [String: EncodedNode])
        case array([Slot])
    }
    enum Slot {
        case value(JSONValue)
        case node(EncodedNode)
    }
    var content = Content.empty

    var value: JSONValue {
        switch content {
        case .empty: return .object([:]) // an `encode(to:)` that wrote nothing, as JSONEncoder writes it
        case .value(let value): return value
        case .object(var members, let nested):
            for (key, node) in nested { members[key] = node.value }
            return .object(members)
        case .array(let slots):
            return .array(slots.map { slot in
                switch slot {
                case .value(let value): value
                case .node(let node): node.value
                }
            })
        }
    }

    func set(_ key: String, _ value: JSONValue) {
        guard case .object(var members, let nested) = content else { return }
        content = .empty // keeps `members` uniquely referenced while it changes
        members[key] = value
        content = .object(members, nested: nested)
    }

    func setNested(_ key: String, _ node: EncodedNode) {
        guard case .object(let members, var nested) = content else { return }
        nested[key] = node
        content = .object(members, nested: nested)
    }

    func append(_ slot: Slot) {
        guard case .array(var slots) = content else { return }
        content = .empty
        slots.append(slot)
        content = .array(slots)
    }

    var count: Int {
        if case .array(let slots) = content { return slots.count }
        return 0
    }
}

private struct ValueEncoder: Encoder, SingleValueEncodingContainer {
    let node: EncodedNode
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// The value of `value`: primitives and dates directly, anything else through its `encode(to:)`.
    static func encode<T: Encodable>(_ value: T, path: [any CodingKey]) throws -> JSONValue {
        try encode(value, path: { path })
    }

    static func encode<T: Encodable>(_ value: T, path: () -> [any CodingKey]) throws -> JSONValue {
        // The type compared by its metadata (a pointer) before any cast: failed dynamic casts, one per case for every
        // enum or struct member, went through the runtime's cast machinery (`tryCast`, conformance caches).
        // swiftlint:disable force_cast — each cast is to the type `T` was just found to be.
        if T.self == String.self { return .string(value as! String) }
        if T.self == Date.self { return .string(RFC3339.format(value as! Date)) }
        if T.self == Int64.self { return .integer(value as! Int64) }
        if T.self == Int.self { return .integer(Int64(value as! Int)) }
        if T.self == Bool.self { return .bool(value as! Bool) }
        if T.self == JSONValue.self { return value as! JSONValue }
        // swiftlint:enable force_cast
        let node = EncodedNode()
        try value.encode(to: ValueEncoder(node: node, codingPath: path()))
        return node.value
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        // Room for an event's members at once (a dictionary grown one member at a time rehashes at every doubling).
        if case .object = node.content {} else { node.content = .object(Dictionary(minimumCapacity: 16), nested: [:]) }
        return KeyedEncodingContainer(KeyedContainer<Key>(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = node.content {} else { node.content = .array([]) }
        return UnkeyedContainer(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { self }

    // SingleValueEncodingContainer
    func encodeNil() throws { node.content = .value(.null) }
    func encode(_ value: Bool) throws { node.content = .value(.bool(value)) }
    func encode(_ value: String) throws { node.content = .value(.string(value)) }
    func encode(_ value: Double) throws { node.content = .value(try JSONValueEncoding.number(value, codingPath)) }
    func encode(_ value: Float) throws { node.content = .value(try JSONValueEncoding.number(Double(value), codingPath)) }
    func encode(_ value: Int) throws { node.content = .value(.integer(Int64(value))) }
    func encode(_ value: Int8) throws { node.content = .value(.integer(Int64(value))) }
    func encode(_ value: Int16) throws { node.content = .value(.integer(Int64(value))) }
    func encode(_ value: Int32) throws { node.content = .value(.integer(Int64(value))) }
    func encode(_ value: Int64) throws { node.content = .value(.integer(value)) }
    func encode(_ value: UInt) throws { node.content = .value(try JSONValueEncoding.integer(value, codingPath)) }
    func encode(_ value: UInt8) throws { node.content = .value(.integer(Int64(value))) }
    func encode(_ value: UInt16) throws { node.content = .value(.integer(Int64(value))) }
    func encode(_ value: UInt32) throws { node.content = .value(.integer(Int64(value))) }
    func encode(_ value: UInt64) throws { node.content = .value(try JSONValueEncoding.integer(value, codingPath)) }
    func encode<T: Encodable>(_ value: T) throws { node.content = .value(try Self.encode(value, path: codingPath)) }
}

private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: EncodedNode
    let codingPath: [any CodingKey]

    private func path(_ key: Key) -> [any CodingKey] { codingPath + [key] }

    mutating func encodeNil(forKey key: Key) throws { node.set(key.stringValue, .null) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { node.set(key.stringValue, .bool(value)) }
    mutating func encode(_ value: String, forKey key: Key) throws { node.set(key.stringValue, .string(value)) }
    mutating func encode(_ value: Double, forKey key: Key) throws { node.set(key.stringValue, try JSONValueEncoding.number(value, path(key))) }
    mutating func encode(_ value: Float, forKey key: Key) throws { node.set(key.stringValue, try JSONValueEncoding.number(Double(value), path(key))) }
    mutating func encode(_ value: Int, forKey key: Key) throws { node.set(key.stringValue, .integer(Int64(value))) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { node.set(key.stringValue, .integer(Int64(value))) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { node.set(key.stringValue, .integer(Int64(value))) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { node.set(key.stringValue, .integer(Int64(value))) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { node.set(key.stringValue, .integer(value)) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { node.set(key.stringValue, try JSONValueEncoding.integer(value, path(key))) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { node.set(key.stringValue, .integer(Int64(value))) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { node.set(key.stringValue, .integer(Int64(value))) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { node.set(key.stringValue, .integer(Int64(value))) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { node.set(key.stringValue, try JSONValueEncoding.integer(value, path(key))) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        // The member's path is made only for a value that has members of its own (or fails): most are strings and dates.
        node.set(key.stringValue, try ValueEncoder.encode(value, path: { path(key) }))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let child = EncodedNode()
        node.setNested(key.stringValue, child)
        return ValueEncoder(node: child, codingPath: path(key)).container(keyedBy: keyType)
    }
    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let child = EncodedNode()
        node.setNested(key.stringValue, child)
        return ValueEncoder(node: child, codingPath: path(key)).unkeyedContainer()
    }
    mutating func superEncoder() -> any Encoder { superEncoder(key: "super", path: codingPath + [JSONValueDecoding.NameKey("super")]) }
    mutating func superEncoder(forKey key: Key) -> any Encoder { superEncoder(key: key.stringValue, path: path(key)) }
    private func superEncoder(key: String, path: [any CodingKey]) -> any Encoder {
        let child = EncodedNode()
        node.setNested(key, child)
        return ValueEncoder(node: child, codingPath: path)
    }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let node: EncodedNode
    let codingPath: [any CodingKey]
    var count: Int { node.count }

    private var nextPath: [any CodingKey] { codingPath + [JSONValueDecoding.IndexKey(count)] }

    mutating func encodeNil() throws { node.append(.value(.null)) }
    mutating func encode(_ value: Bool) throws { node.append(.value(.bool(value))) }
    mutating func encode(_ value: String) throws { node.append(.value(.string(value))) }
    mutating func encode(_ value: Double) throws { node.append(.value(try JSONValueEncoding.number(value, nextPath))) }
    mutating func encode(_ value: Float) throws { node.append(.value(try JSONValueEncoding.number(Double(value), nextPath))) }
    mutating func encode(_ value: Int) throws { node.append(.value(.integer(Int64(value)))) }
    mutating func encode(_ value: Int8) throws { node.append(.value(.integer(Int64(value)))) }
    mutating func encode(_ value: Int16) throws { node.append(.value(.integer(Int64(value)))) }
    mutating func encode(_ value: Int32) throws { node.append(.value(.integer(Int64(value)))) }
    mutating func encode(_ value: Int64) throws { node.append(.value(.integer(value))) }
    mutating func encode(_ value: UInt) throws { node.append(.value(try JSONValueEncoding.integer(value, nextPath))) }
    mutating func encode(_ value: UInt8) throws { node.append(.value(.integer(Int64(value)))) }
    mutating func encode(_ value: UInt16) throws { node.append(.value(.integer(Int64(value)))) }
    mutating func encode(_ value: UInt32) throws { node.append(.value(.integer(Int64(value)))) }
    mutating func encode(_ value: UInt64) throws { node.append(.value(try JSONValueEncoding.integer(value, nextPath))) }
    mutating func encode<T: Encodable>(_ value: T) throws { node.append(.value(try ValueEncoder.encode(value, path: nextPath))) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let child = EncodedNode()
        let path = nextPath
        node.append(.node(child))
        return ValueEncoder(node: child, codingPath: path).container(keyedBy: keyType)
    }
    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let child = EncodedNode()
        let path = nextPath
        node.append(.node(child))
        return ValueEncoder(node: child, codingPath: path).unkeyedContainer()
    }
    mutating func superEncoder() -> any Encoder {
        let child = EncodedNode()
        let path = nextPath
        node.append(.node(child))
        return ValueEncoder(node: child, codingPath: path)
    }
}

/// The values JSON cannot hold, refused as `JSONEncoder` refuses them.
private enum JSONValueEncoding {
    static func number(_ value: Double, _ path: [any CodingKey]) throws -> JSONValue {
        guard value.isFinite else {
            throw EncodingError.invalidValue(value, .init(codingPath: path, debugDescription: "\(value) is not a JSON number"))
        }
        return .number(value)
    }

    static func integer<I: BinaryInteger>(_ value: I, _ path: [any CodingKey]) throws -> JSONValue {
        guard let exact = Int64(exactly: value) else {
            throw EncodingError.invalidValue(value, .init(codingPath: path, debugDescription: "\(value) is beyond a 64-bit JSON integer"))
        }
        return .integer(exact)
    }
}

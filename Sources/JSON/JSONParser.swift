/// A small, strict JSON parser over UTF-8 bytes, with a nesting limit (no recursion bombs) and a limit on the values it
/// builds (a small body of `[[0],[0],…]` is a value per 2 bytes, each of which takes tens of bytes once built).
/// Integers that fit in `Int64` stay exact; other numbers are `Double`. An object that names a key twice is
/// refused: parsers disagree on which value wins (Foundation keeps the first, most keep the last), so a schema
/// could check one value while a decoder uses the other.
struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    let maxDepth: Int
    let maxValues: Int
    var index = 0
    /// Values that may still be built.
    private var valuesLeft: Int
    /// Why parsing stopped, when it was for a reason more specific than malformed JSON.
    var failure: JSONParseError?
    /// The members of the objects being parsed, innermost last: one buffer for the document, so that each object's
    /// dictionary is made once at its final size instead of growing, and rehashing, member by member.
    private var members: [(key: String, value: JSONValue)] = []

    init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int, maxValues: Int = .max) {
        self.bytes = bytes
        self.maxDepth = maxDepth
        self.maxValues = maxValues
        valuesLeft = maxValues
    }

    /// The document; with `keeping`, a top-level object holds only the members of those names (see `JSONValue.parseDocument`).
    mutating func parseDocument(keeping: Set<String>? = nil) -> JSONValue? {
        guard let value = parseValue(depth: 0, keeping: keeping) else { return nil }
        skipWhitespace()
        return index == bytes.count ? value : nil
    }

    private mutating func parseValue(depth: Int, keeping: Set<String>? = nil) -> JSONValue? {
        skipWhitespace()
        guard index < bytes.count else { return nil }
        guard depth <= maxDepth else {
            failure = .tooDeep(maxDepth)
            return nil
        }
        guard valuesLeft > 0 else {
            failure = .tooManyValues(maxValues)
            return nil
        }
        valuesLeft -= 1
        switch bytes[index] {
        case UInt8(ascii: "{"): return parseObject(depth: depth + 1, keeping: keeping)
        case UInt8(ascii: "["): return parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return parseString().map(JSONValue.string)
        case UInt8(ascii: "t"): return literal("true", .bool(true))
        case UInt8(ascii: "f"): return literal("false", .bool(false))
        case UInt8(ascii: "n"): return literal("null", .null)
        default: return parseNumber()
        }
    }

    /// With `keeping`, a member of another name is checked to be JSON and dropped unread: never built, not counted
    /// against `maxValues`, and not compared with another member of its name (nothing reads either).
    private mutating func parseObject(depth: Int, keeping: Set<String>?) -> JSONValue? {
        index += 1
        skipWhitespace()
        if consume(UInt8(ascii: "}")) { return .object([:]) }
        let first = members.count
        defer { members.removeLast(members.count - first) }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), let key = parseString() else { return nil }
            skipWhitespace()
            guard consume(UInt8(ascii: ":")) else { return nil }
            if let keeping, !keeping.contains(key) {
                guard skipValue(depth: depth) else { return nil }
            } else {
                guard let value = parseValue(depth: depth) else { return nil }
                members.append((key, value))
            }
            skipWhitespace()
            if consume(UInt8(ascii: ",")) { continue }
            guard consume(UInt8(ascii: "}")) else { return nil }
            var object = [String: JSONValue](minimumCapacity: members.count - first)
            for member in members[first...] where object.updateValue(member.value, forKey: member.key) != nil {
                failure = .duplicateKey(String(member.key.prefix(64)))
                return nil
            }
            return .object(object)
        }
    }

    private mutating func parseArray(depth: Int) -> JSONValue? {
        index += 1
        var array: [JSONValue] = []
        skipWhitespace()
        if consume(UInt8(ascii: "]")) { return .array(array) }
        while true {
            guard let value = parseValue(depth: depth) else { return nil }
            array.append(value)
            skipWhitespace()
            if consume(UInt8(ascii: ",")) { continue }
            return consume(UInt8(ascii: "]")) ? .array(array) : nil
        }
    }

    /// Checks one value as `parseValue` would (grammar, nesting, strings' escapes and UTF-8) without building it.
    private mutating func skipValue(depth: Int) -> Bool {
        skipWhitespace()
        guard index < bytes.count else { return false }
        guard depth <= maxDepth else {
            failure = .tooDeep(maxDepth)
            return false
        }
        let open = bytes[index]
        switch open {
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            let close = open == UInt8(ascii: "{") ? UInt8(ascii: "}") : UInt8(ascii: "]")
            index += 1
            skipWhitespace()
            if consume(close) { return true }
            while true {
                if open == UInt8(ascii: "{") {
                    skipWhitespace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), parseString() != nil else { return false }
                    skipWhitespace()
                    guard consume(UInt8(ascii: ":")) else { return false }
                }
                guard skipValue(depth: depth + 1) else { return false }
                skipWhitespace()
                if consume(UInt8(ascii: ",")) { continue }
                return consume(close)
            }
        case UInt8(ascii: "\""): return parseString() != nil
        case UInt8(ascii: "t"): return literal("true", .null) != nil
        case UInt8(ascii: "f"): return literal("false", .null) != nil
        case UInt8(ascii: "n"): return literal("null", .null) != nil
        default: return parseNumber() != nil
        }
    }

    private mutating func parseString() -> String? {
        index += 1
        let start = index
        // Fast path: no escapes. ASCII needs no UTF-8 check (`String(validating:)` is generic, unspecialized here: its
        // type metadata lookups cost more than the check).
        var union: UInt8 = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[start..<index])
                index += 1
                return union < 0x80 ? String(decoding: slice, as: UTF8.self) : String(validating: slice, as: UTF8.self)
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { return nil }
            union |= byte
            index += 1
        }
        var scalars = Array(bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(validating: scalars, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { return nil }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scalars.append(escape)
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0C)
                case UInt8(ascii: "n"): scalars.append(0x0A)
                case UInt8(ascii: "r"): scalars.append(0x0D)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "u"):
                    guard var code = hex4() else { return nil }
                    if (0xD800...0xDBFF).contains(code) {
                        guard consume(UInt8(ascii: "\\")), consume(UInt8(ascii: "u")), let low = hex4(),
                              (0xDC00...0xDFFF).contains(low) else { return nil }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(code) else { return nil }
                    scalars.append(contentsOf: Array(String(Character(scalar)).utf8))
                default: return nil
                }
            default:
                if byte < 0x20 { return nil }
                scalars.append(byte)
            }
        }
        return nil
    }

    private mutating func hex4() -> UInt32? {
        guard index + 4 <= bytes.count else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            index += 1
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    private mutating func parseNumber() -> JSONValue? {
        let start = index
        _ = consume(UInt8(ascii: "-"))
        guard index < bytes.count else { return nil }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            guard digits() > 0 else { return nil }
        }
        var isInteger = true
        if consume(UInt8(ascii: ".")) {
            isInteger = false
            guard digits() > 0 else { return nil }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if !consume(UInt8(ascii: "+")) { _ = consume(UInt8(ascii: "-")) }
            guard digits() > 0 else { return nil }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger, let integer = Int64(text) { return .integer(integer) }
        guard let double = Double(text), double.isFinite else { return nil }
        return .number(double)
    }

    private mutating func digits() -> Int {
        let start = index
        while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        return index - start
    }

    private mutating func literal(_ text: StaticString, _ value: JSONValue) -> JSONValue? {
        let count = text.utf8CodeUnitCount
        guard index + count <= bytes.count else { return nil }
        for offset in 0..<count where bytes[index + offset] != text.utf8Start[offset] { return nil }
        index += count
        return value
    }

    private mutating func consume(_ byte: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }
}

/// Why a document is not accepted as JSON.
public enum JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Not JSON (RFC 8259) at byte `offset`.
    case malformed(offset: Int)
    /// An object names `key` twice.
    case duplicateKey(String)
    /// Nested deeper than the limit.
    case tooDeep(Int)
    /// More values (objects, arrays, strings, numbers, literals) than the limit.
    case tooManyValues(Int)

    /// A short reason, as dead letters and HTTP errors carry it.
    public var reason: String {
        switch self {
        case .malformed: "invalidJSON"
        case .duplicateKey: "duplicateKey"
        case .tooDeep: "tooDeep"
        case .tooManyValues: "tooManyValues"
        }
    }

    public var description: String {
        switch self {
        case .malformed(let offset): "not JSON (at byte \(offset))"
        case .duplicateKey(let key): "an object names the key '\(key)' twice"
        case .tooDeep(let limit): "nested deeper than \(limit) levels"
        case .tooManyValues(let limit): "more than \(limit) values"
        }
    }
}

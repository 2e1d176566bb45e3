/// Text that names something from outside the pipeline (a user, a transaction, a product, a Kafka key), whose identity is
/// its UTF-8 bytes.
///
/// Swift's `String` compares and hashes by Unicode canonical equivalence: `"café"` spelled with `é` (U+00E9) and with
/// `e` + U+0301 are equal Strings. The broker, SQLite and PostgreSQL compare bytes, so for them these are two users, two
/// keys, two rows. An id kept as an `Identifier` is equal to another only when their bytes are, in every map, set and
/// comparison, as it is everywhere else: nothing is normalized, the producer's bytes are the identity.
///
/// `Kind` only keeps kinds of identifiers apart (a user id is not a product id); it is never instantiated.
public struct Identifier<Kind>: Hashable, Comparable, Sendable, Codable, CustomStringConvertible, ExpressibleByStringInterpolation {
    /// The identifier as the producer wrote it.
    public let rawValue: String

    public init(_ rawValue: String) { self.rawValue = rawValue }

    public init(stringLiteral value: String) { rawValue = value }

    /// The same bytes as an identifier of another kind (an AppCoins purchase token that names its transaction).
    public init<Other>(_ other: Identifier<Other>) { rawValue = other.rawValue }

    public init(stringInterpolation: DefaultStringInterpolation) { rawValue = String(stringInterpolation: stringInterpolation) }

    public var description: String { rawValue }

    /// The number of UTF-8 bytes.
    public var byteCount: Int { rawValue.utf8.count }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        let (left, right) = (lhs.rawValue.utf8, rhs.rawValue.utf8)
        return left.count == right.count && left.elementsEqual(right)
    }

    public func hash(into hasher: inout Hasher) {
        var text = rawValue
        // Native Swift strings are contiguous UTF-8 already: this copies nothing for them.
        text.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        hasher.combine(text.utf8.count) // so that the bytes of two ids hashed in a row do not run into each other
    }

    /// Byte order (unsigned bytes, as SQLite's `BINARY` and PostgreSQL's `C` collation order text): the same in every
    /// process, whatever the locale.
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue.utf8.lexicographicallyPrecedes(rhs.rawValue.utf8) }

    public init(from decoder: any Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// A map keyed by identifiers is coded as an object named by their text (`{"coins": 5}`), as a `String`-keyed one is.
extension Identifier: CodingKeyRepresentable {
    public var codingKey: any CodingKey { IdentifierCodingKey(stringValue: rawValue) }

    public init?<T: CodingKey>(codingKey: T) { rawValue = codingKey.stringValue }
}

private struct IdentifierCodingKey: CodingKey {
    let stringValue: String
    init(stringValue: String) { self.stringValue = stringValue }
    var intValue: Int? { nil }
    init?(intValue: Int) { nil }
}

extension Identifier {
    /// The UTF-8 bytes in hex (`63 61 66 c3 a9`): how a message tells two spellings of one text apart.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        for byte in rawValue.utf8 {
            if !text.isEmpty { text.append(UInt8(ascii: " ")) }
            text += [digits[Int(byte >> 4)], digits[Int(byte & 0xF)]]
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The identifier and its bytes, for a message: `'café' (63 61 66 c3 a9)`.
    public var quotedWithHex: String { "'\(rawValue)' (\(hex))" }

    /// Whether `self` and `other` are one text in two Unicode spellings: equal as Swift `String`s (canonically
    /// equivalent), different as bytes, so two identifiers wherever they are compared.
    public func isOtherSpelling(of other: Self) -> Bool { self != other && rawValue == other.rawValue }
}

import Foundation

/// A bounded, defensive reader of DER (the subset receipts use): single-byte tags, definite lengths of
/// at most 4 length bytes, every length checked against what remains. It never recurses; callers
/// descend explicitly, so nesting cannot exhaust the stack.
struct DERReader {
    struct Element {
        let tag: UInt8
        let content: ArraySlice<UInt8>
    }

    struct Malformed: Error, CustomStringConvertible {
        let description: String
    }

    static let sequence: UInt8 = 0x30
    static let set: UInt8 = 0x31
    static let integer: UInt8 = 0x02
    static let octetString: UInt8 = 0x04
    static let utf8String: UInt8 = 0x0C
    static let ia5String: UInt8 = 0x16

    private var remaining: ArraySlice<UInt8>

    init(_ bytes: ArraySlice<UInt8>) { remaining = bytes }

    var isAtEnd: Bool { remaining.isEmpty }

    mutating func next() throws -> Element {
        guard let tag = remaining.first else { throw Malformed(description: "unexpected end of data") }
        guard tag & 0x1F != 0x1F else { throw Malformed(description: "multi-byte tags are not supported") }
        var index = remaining.index(after: remaining.startIndex)
        guard index < remaining.endIndex else { throw Malformed(description: "missing length") }
        let first = remaining[index]
        index += 1
        var length = 0
        if first < 0x80 {
            length = Int(first)
        } else {
            let count = Int(first & 0x7F)
            guard count >= 1, count <= 4 else { throw Malformed(description: "unsupported length of \(count) bytes") }
            guard remaining.endIndex - index >= count else { throw Malformed(description: "truncated length") }
            for _ in 0..<count {
                length = length << 8 | Int(remaining[index])
                index += 1
            }
            guard length >= 0x80 || count > 1 else { throw Malformed(description: "non-minimal length") }
        }
        guard remaining.endIndex - index >= length else { throw Malformed(description: "length \(length) exceeds the \(remaining.endIndex - index) bytes left") }
        let content = remaining[index..<index + length]
        remaining = remaining[(index + length)...]
        return Element(tag: tag, content: content)
    }

    mutating func next(expecting tag: UInt8) throws -> Element {
        let element = try next()
        guard element.tag == tag else { throw Malformed(description: String(format: "expected tag 0x%02X, found 0x%02X", tag, element.tag)) }
        return element
    }

    /// A non-negative INTEGER that fits in Int64.
    static func integer(_ content: ArraySlice<UInt8>) throws -> Int64 {
        guard !content.isEmpty, content.count <= 9 else { throw Malformed(description: "integer of \(content.count) bytes") }
        guard content.first! & 0x80 == 0 else { throw Malformed(description: "negative integer") }
        // Nine bytes only as a 0x00 before a high eighth: another first byte would be shifted out below (2^64 + 5 read as 5).
        guard content.count < 9 || content.first == 0 else { throw Malformed(description: "integer out of range") }
        var value: UInt64 = 0
        for byte in content { value = value << 8 | UInt64(byte) }
        guard value <= UInt64(Int64.max) else { throw Malformed(description: "integer out of range") }
        return Int64(value)
    }
}

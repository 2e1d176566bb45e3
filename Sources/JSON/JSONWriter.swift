/// JSON text from `JSONValue`, written as UTF-8 bytes in one pass (no `JSONEncoder`, no `Foundation` strings).
extension JSONValue {
    /// The value as compact JSON in UTF-8: object keys sorted (stable lines for tools and tests), characters outside
    /// ASCII as they are, `/` not escaped, control characters escaped; a non-finite number (which JSON cannot hold)
    /// as `null`.
    public var serialized: [UInt8] {
        var output: [UInt8] = []
        write(to: &output)
        return output
    }

    /// `serialized` as text: one line of JSON, as the command-line tools print their results.
    public var serializedText: String { String(decoding: serialized, as: UTF8.self) }

    /// Appends the value, as `serialized` writes it, to `output`.
    public func write(to output: inout [UInt8]) {
        switch self {
        case .null: output += "null".utf8
        case .bool(let value): output += (value ? "true" : "false").utf8
        case .integer(let value): Self.write(integer: value, to: &output)
        case .number(let value):
            if !value.isFinite {
                output += "null".utf8
            } else if let integral = Int64(exactly: value), integral.magnitude < 1 << 53 {
                output += String(integral).utf8 // as JSONEncoder writes 1.0: 1
            } else {
                output += String(value).utf8 // shortest round-tripping form, e.g. 0.1 or 1e+20
            }
        case .string(let value): Self.write(string: value, to: &output)
        case .array(let values):
            output.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                value.write(to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let fields):
            output.append(UInt8(ascii: "{"))
            // Sorted as pairs: sorting the keys alone meant hashing each again to find its value.
            for (index, field) in fields.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                Self.write(string: field.key, to: &output)
                output.append(UInt8(ascii: ":"))
                field.value.write(to: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    /// An object of `members`, each value already serialized, in the order of their names' bytes: every name is its own
    /// member, where `.object`, keyed by `String`, keeps one of two names that are one text in two Unicode spellings
    /// (`café` with é as one scalar or two). For objects keyed by codes from outside, told apart by their bytes.
    public static func serializedObject(_ members: [(name: String, value: [UInt8])]) -> [UInt8] {
        var output: [UInt8] = [UInt8(ascii: "{")]
        for (index, member) in members.sorted(by: { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }).enumerated() {
            if index > 0 { output.append(UInt8(ascii: ",")) }
            write(string: member.name, to: &output)
            output.append(UInt8(ascii: ":"))
            output += member.value
        }
        output.append(UInt8(ascii: "}"))
        return output
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// An integer's decimal digits, without making a String of them.
    private static func write(integer: Int64, to output: inout [UInt8]) {
        if integer < 0 { output.append(UInt8(ascii: "-")) }
        var magnitude = integer.magnitude
        let start = output.count
        repeat {
            output.append(UInt8(ascii: "0") + UInt8(magnitude % 10))
            magnitude /= 10
        } while magnitude > 0
        output[start...].reverse()
    }

    /// A JSON string literal (RFC 8259 §7): quote, backslash and control characters escaped.
    static func write(string: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        // Most strings (ids, dates, base64) need no escape: checked on their bytes, then copied at once (from the
        // string's contiguous UTF-8, a memcpy, where appending its UTF8View went through the generic path).
        var string = string
        let plain = string.withUTF8 { bytes in
            guard !bytes.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else { return false }
            output.append(contentsOf: bytes)
            return true
        }
        if plain {
            output.append(UInt8(ascii: "\""))
            return
        }
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): output += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): output += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x0A: output += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0D: output += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case 0x09: output += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case 0x08: output += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
            case 0x0C: output += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
            case 0..<0x20: output += [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0xF)]]
            default: output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
    }
}

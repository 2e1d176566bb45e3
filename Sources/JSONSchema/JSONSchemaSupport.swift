import Foundation
import JSON

extension JSONSchemaRegistry {
    static let knownKeywords: Set<String> = [
        "$schema", "$id", "$ref", "$defs", "$comment", "title", "description", "examples", "default",
        "type", "properties", "required", "additionalProperties", "enum", "const", "pattern", "format",
        "minimum", "maximum", "minLength", "maxLength", "items", "minItems", "maxItems", "oneOf", "anyOf", "allOf",
    ]

    /// Rejects keywords this validator does not implement and compiles patterns, recursively.
    static func check(_ schema: JSONValue, at location: String, patterns: inout [String: NSRegularExpression]) throws {
        if case .bool = schema { return }
        guard let object = schema.objectValue else { throw SchemaError(description: "\(location): a schema must be an object or a boolean") }
        for (keyword, value) in object {
            guard knownKeywords.contains(keyword) else { throw SchemaError(description: "\(location): unsupported keyword '\(keyword)'") }
            switch keyword {
            case "properties", "$defs":
                for (name, subschema) in value.objectValue ?? [:] { try check(subschema, at: "\(location)/\(keyword)/\(name)", patterns: &patterns) }
            case "items", "additionalProperties":
                try check(value, at: "\(location)/\(keyword)", patterns: &patterns)
            case "oneOf", "anyOf", "allOf":
                for (index, subschema) in (value.arrayValue ?? []).enumerated() {
                    try check(subschema, at: "\(location)/\(keyword)/\(index)", patterns: &patterns)
                }
            case "pattern":
                guard let text = value.stringValue else { throw SchemaError(description: "\(location): pattern must be a string") }
                do {
                    patterns[text] = try NSRegularExpression(pattern: text)
                } catch {
                    throw SchemaError(description: "\(location): invalid pattern \(text): \(error)")
                }
            case "format":
                guard let format = value.stringValue, ["date-time", "uuid"].contains(format) else {
                    throw SchemaError(description: "\(location): unsupported format \(value)")
                }
            default:
                break
            }
        }
    }

    static func matches(_ instance: JSONValue, type: JSONValue) -> Bool {
        if let names = type.arrayValue { return names.contains { matches(instance, type: $0) } }
        switch (type.stringValue, instance) {
        case ("string", .string), ("boolean", .bool), ("null", .null), ("array", .array), ("object", .object): return true
        case ("number", .integer), ("number", .number), ("integer", .integer): return true
        case ("integer", .number(let value)): return value.rounded() == value
        default: return false
        }
    }

    static func equal(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.integer, .number), (.number, .integer), (.number, .number), (.integer, .integer): return double(a) == double(b)
        default: return a == b
        }
    }

    static func double(_ value: JSONValue) -> Double {
        switch value {
        case .integer(let integer): Double(integer)
        case .number(let number): number
        default: .nan
        }
    }

    static func optionalDouble(_ value: JSONValue?) -> Double? {
        guard let value else { return nil }
        let number = double(value)
        return number.isNaN ? nil : number
    }

    static func typeName(_ value: JSONValue) -> String {
        switch value {
        case .string: "string"
        case .integer: "integer"
        case .number: "number"
        case .bool: "boolean"
        case .null: "null"
        case .array: "array"
        case .object: "object"
        }
    }

    static func describe(_ type: JSONValue) -> String {
        type.arrayValue?.compactMap(\.stringValue).joined(separator: " or ") ?? type.stringValue ?? "?"
    }

    static func render(_ value: JSONValue) -> String {
        switch value {
        case .string(let text): "\"\(text)\""
        case .integer(let integer): String(integer)
        case .number(let number): String(number)
        case .bool(let flag): String(flag)
        case .null: "null"
        case .array: "[…]"
        case .object: "{…}"
        }
    }

    static func escape(_ name: String) -> String {
        name.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
    }

    /// `date-time` (RFC 3339, with a time zone) and `uuid` (RFC 4122 textual form).
    static func conforms(_ text: String, to format: String) -> Bool {
        switch format {
        case "date-time": return RFC3339Format.isValid(text)
        case "uuid":
            let bytes = Array(text.utf8)
            guard bytes.count == 36 else { return false }
            for (index, byte) in bytes.enumerated() {
                if [8, 13, 18, 23].contains(index) {
                    guard byte == UInt8(ascii: "-") else { return false }
                } else {
                    guard (48...57).contains(byte) || (97...102).contains(byte) || (65...70).contains(byte) else { return false }
                }
            }
            return true
        default:
            return true
        }
    }
}

/// RFC 3339 `date-time`: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
enum RFC3339Format {
    static func isValid(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20 else { return false }
        func digits(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                guard index < bytes.count, (48...57).contains(bytes[index]) else { return nil }
                value = value * 10 + Int(bytes[index] - 48)
            }
            return value
        }
        guard digits(0..<4) != nil, bytes[4] == 45, let month = digits(5..<7), bytes[7] == 45, let day = digits(8..<10),
              bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t"),
              let hour = digits(11..<13), bytes[13] == 58, let minute = digits(14..<16), bytes[16] == 58, let second = digits(17..<19),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second <= 60
        else { return false }
        var index = 19
        if bytes[index] == UInt8(ascii: ".") {
            index += 1
            let start = index
            while index < bytes.count, (48...57).contains(bytes[index]) { index += 1 }
            guard index > start else { return false }
        }
        guard index < bytes.count else { return false }
        if bytes[index] == UInt8(ascii: "Z") || bytes[index] == UInt8(ascii: "z") { return index + 1 == bytes.count }
        guard bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-"), index + 6 == bytes.count,
              let hours = digits(index + 1..<index + 3), bytes[index + 3] == 58, let minutes = digits(index + 4..<index + 6)
        else { return false }
        return hours < 24 && minutes < 60
    }
}

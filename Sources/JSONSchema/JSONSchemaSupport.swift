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

    /// A property name as a JSON pointer token (`~` → `~0`, `/` → `~1`).
    static func escape(_ name: String) -> String {
        guard name.utf8.contains(where: { $0 == UInt8(ascii: "~") || $0 == UInt8(ascii: "/") }) else { return name }
        return name.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
    }

    /// `date-time` (RFC 3339, with a time zone) and `uuid` (RFC 4122 textual form).
    static func conforms(_ text: String, to format: String) -> Bool {
        switch format {
        case "date-time": return RFC3339.parse(text) != nil
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

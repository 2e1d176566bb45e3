import Foundation
import JSON

/// A JSON Schema (draft 2020-12) validator for the keywords this project's schemas use: `type`,
/// `properties`, `required`, `additionalProperties`, `enum`, `const`, `pattern`, `format`
/// (`date-time`, `uuid`), `minimum`/`maximum`, `minLength`/`maxLength`, `items`, `minItems`/`maxItems`,
/// `$ref`/`$defs` (within a schema and across registered schemas by `$id`), `oneOf`/`anyOf`/`allOf`.
/// An unknown keyword is an error when the schema is registered, so no schema silently checks less
/// than it says.
public final class JSONSchemaRegistry: Sendable {
    /// One failed check: where in the instance, and what was expected.
    public struct Violation: Sendable, Hashable, CustomStringConvertible {
        public let path: String
        public let message: String
        public var description: String { "\(path.isEmpty ? "/" : path): \(message)" }
    }

    public struct SchemaError: Error, Sendable, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    private let schemas: [String: JSONValue]
    private let patterns: [String: NSRegularExpression]
    /// The patterns matched without NSRegularExpression (see `ClassSequencePattern`).
    private let classPatterns: [String: ClassSequencePattern]
    /// Every `$ref` of every schema resolved once, by the id of the schema it appears in and the reference.
    private let references: [String: [String: (schema: JSONValue, rootID: String)]]
    /// The directory the schemas were loaded from, if any.
    public let directory: String?

    /// Registers schemas, each with an `$id`.
    public convenience init(schemas: [JSONValue]) throws {
        try self.init(schemas: schemas, directory: nil)
    }

    private init(schemas: [JSONValue], directory: String?) throws {
        self.directory = directory
        var byID: [String: JSONValue] = [:]
        var patterns: [String: NSRegularExpression] = [:]
        for schema in schemas {
            guard let id = schema.objectValue?["$id"]?.stringValue else { throw SchemaError(description: "schema without $id") }
            try Self.check(schema, at: id, patterns: &patterns)
            byID[id] = schema
        }
        self.schemas = byID
        self.patterns = patterns
        classPatterns = patterns.keys.reduce(into: [:]) { compiled, pattern in compiled[pattern] = ClassSequencePattern(pattern) }
        var references: [String: [String: (schema: JSONValue, rootID: String)]] = [:]
        for (id, schema) in byID {
            for reference in Self.references(in: schema) {
                if let target = Self.resolve(reference, rootID: id, in: byID) { references[id, default: [:]][reference] = target }
            }
        }
        self.references = references
    }

    /// Loads every `*.json` file of a directory as a schema.
    public convenience init(directory: URL) throws {
        let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "json" }.sorted { $0.path < $1.path }
        try self.init(schemas: try files.map { file in
            guard let value = JSONValue.parse(Array(try Data(contentsOf: file))) else {
                throw SchemaError(description: "\(file.lastPathComponent) is not valid JSON")
            }
            return value
        }, directory: directory.path)
    }

    public var ids: [String] { schemas.keys.sorted() }

    /// Validates `instance` against the schema registered as `id`; empty when valid.
    public func validate(_ instance: JSONValue, against id: String) -> [Violation] {
        guard let schema = schemas[id] else { return [Violation(path: "", message: "unknown schema \(id)")] }
        var violations: [Violation] = []
        validate(instance, schema, rootID: id, path: "", into: &violations, depth: 0)
        return violations
    }

    // MARK: - Validation

    private static let maxDepth = 64

    private func validate(_ instance: JSONValue, _ schemaValue: JSONValue, rootID: String, path: String,
                          into violations: inout [Violation], depth: Int) {
        guard depth < Self.maxDepth else {
            violations.append(Violation(path: path, message: "schema nesting too deep"))
            return
        }
        if case .bool(let allowed) = schemaValue {
            if !allowed { violations.append(Violation(path: path, message: "no value is allowed here")) }
            return
        }
        guard let schema = schemaValue.objectValue else { return }
        func fail(_ message: String) { violations.append(Violation(path: path, message: message)) }

        if let reference = schema["$ref"]?.stringValue {
            if let target = references[rootID]?[reference] {
                validate(instance, target.schema, rootID: target.rootID, path: path, into: &violations, depth: depth + 1)
            } else {
                fail("unresolvable $ref \(reference)")
            }
        }
        if let type = schema["type"], !Self.matches(instance, type: type) {
            fail("expected \(Self.describe(type)), found \(Self.typeName(instance))")
            return // Other keywords would only repeat the type mismatch.
        }
        if let options = schema["enum"]?.arrayValue, !options.contains(where: { Self.equal($0, instance) }) {
            fail("must be one of \(options.map(Self.render).joined(separator: ", "))")
        }
        if let constant = schema["const"], !Self.equal(constant, instance) {
            fail("must be \(Self.render(constant))")
        }
        switch instance {
        case .string(let text):
            let (minimum, maximum) = (schema["minLength"]?.int64Value, schema["maxLength"]?.int64Value)
            if minimum != nil || maximum != nil {
                // A string has at least a quarter as many characters (Unicode scalars) as UTF-8 bytes and at most as many:
                // counted one by one (a walk through it) only when the byte count does not settle it.
                let bytes = Int64(text.utf8.count)
                let settled = (minimum.map { (bytes + 3) / 4 >= $0 } ?? true) && (maximum.map { bytes <= $0 } ?? true)
                let length = settled ? nil : Int64(text.unicodeScalars.count)
                if let minimum, let length, length < minimum { fail("shorter than \(minimum) characters") }
                if let maximum, let length, length > maximum { fail("longer than \(maximum) characters") }
            }
            if let pattern = schema["pattern"]?.stringValue, !matches(text, pattern) { fail("does not match \(pattern)") }
            if let format = schema["format"]?.stringValue, !Self.conforms(text, to: format) { fail("not a valid \(format)") }
        case .integer, .number:
            let number = Self.double(instance)
            if let minimum = Self.optionalDouble(schema["minimum"]), number < minimum { fail("less than \(Self.render(schema["minimum"]!))") }
            if let maximum = Self.optionalDouble(schema["maximum"]), number > maximum { fail("greater than \(Self.render(schema["maximum"]!))") }
        case .array(let elements):
            if let minimum = schema["minItems"]?.int64Value, elements.count < minimum { fail("fewer than \(minimum) items") }
            if let maximum = schema["maxItems"]?.int64Value, elements.count > maximum { fail("more than \(maximum) items") }
            if let items = schema["items"] {
                for (index, element) in elements.enumerated() {
                    validate(element, items, rootID: rootID, path: "\(path)/\(index)", into: &violations, depth: depth + 1)
                }
            }
        case .object(let members):
            for name in schema["required"]?.arrayValue?.compactMap(\.stringValue) ?? [] where members[name] == nil {
                fail("missing required property '\(name)'")
            }
            let properties = schema["properties"]?.objectValue ?? [:]
            for (name, value) in members.sorted(by: { $0.key < $1.key }) {
                let childPath = "\(path)/\(Self.escape(name))"
                if let propertySchema = properties[name] {
                    validate(value, propertySchema, rootID: rootID, path: childPath, into: &violations, depth: depth + 1)
                } else if let additional = schema["additionalProperties"] {
                    if case .bool(false) = additional {
                        violations.append(Violation(path: childPath, message: "property '\(name)' is not allowed"))
                    } else {
                        validate(value, additional, rootID: rootID, path: childPath, into: &violations, depth: depth + 1)
                    }
                }
            }
        default:
            break
        }
        if let all = schema["allOf"]?.arrayValue {
            for subschema in all { validate(instance, subschema, rootID: rootID, path: path, into: &violations, depth: depth + 1) }
        }
        if let any = schema["anyOf"]?.arrayValue, !any.contains(where: { isValid(instance, $0, rootID: rootID, depth: depth) }) {
            fail("matches none of anyOf")
        }
        if let one = schema["oneOf"]?.arrayValue {
            let matching = one.filter { isValid(instance, $0, rootID: rootID, depth: depth) }.count
            if matching != 1 {
                // Say why for the closest branch: the one with the fewest violations.
                let nearest = one.map { branch -> [Violation] in
                    var branchViolations: [Violation] = []
                    validate(instance, branch, rootID: rootID, path: path, into: &branchViolations, depth: depth + 1)
                    return branchViolations
                }.min { $0.count < $1.count } ?? []
                if matching == 0, !nearest.isEmpty {
                    violations.append(contentsOf: nearest)
                } else {
                    fail("matches \(matching) of oneOf, expected exactly 1")
                }
            }
        }
    }

    private func isValid(_ instance: JSONValue, _ schema: JSONValue, rootID: String, depth: Int) -> Bool {
        var violations: [Violation] = []
        validate(instance, schema, rootID: rootID, path: "", into: &violations, depth: depth + 1)
        return violations.isEmpty
    }

    /// Whether `text` matches the (checked) `pattern`.
    private func matches(_ text: String, _ pattern: String) -> Bool {
        if let compiled = classPatterns[pattern] { return compiled.matches(text) }
        guard let regex = patterns[pattern] else { return true }
        return regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
    }

    /// `#/$defs/name` within the schema `rootID`, or `ID` / `ID#/$defs/name` of a registered one: the schema it names and
    /// the id of the document that holds it.
    private static func resolve(_ reference: String, rootID: String, in schemas: [String: JSONValue]) -> (schema: JSONValue, rootID: String)? {
        let parts = reference.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
        let documentID = parts.first.map(String.init).flatMap { $0.isEmpty ? nil : $0 } ?? rootID
        guard let document = schemas[documentID] else { return nil }
        guard parts.count == 2, !parts[1].isEmpty else { return (document, documentID) }
        var node = document
        for token in parts[1].split(separator: "/") {
            let key = token.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
            guard let next = node.objectValue?[key] else { return nil }
            node = next
        }
        return (node, documentID)
    }

    /// The `$ref` values anywhere in `schema`.
    private static func references(in schema: JSONValue) -> [String] {
        switch schema {
        case .object(let members):
            return (members["$ref"]?.stringValue.map { [$0] } ?? []) + members.values.flatMap(references(in:))
        case .array(let elements):
            return elements.flatMap(references(in:))
        default:
            return []
        }
    }
}

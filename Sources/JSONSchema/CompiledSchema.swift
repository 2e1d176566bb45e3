import Foundation
import JSON

/// A schema read once into what validation asks of it: its keywords as fields instead of dictionary lookups per
/// instance value, `$ref`s as indices of the nodes they name (so recursive schemas stay finite), patterns compiled.
/// Nodes live in one array, `CompiledSchemas.nodes`; children are indices into it.
struct CompiledNode: Sendable {
    enum Additional: Sendable {
        case anything
        case nothing
        case schema(Int)
    }

    /// `true` or `false` as a whole schema; nil for an object schema.
    var constant: Bool?
    var reference: Int?
    var unresolvedReference: String?
    var types: TypeSet?
    var typeDescription = ""
    var enumOptions: [JSONValue]?
    var constValue: JSONValue?
    var minLength: Int64?
    var maxLength: Int64?
    var pattern: (text: String, matcher: PatternMatcher)?
    var format: String?
    var minimum: (value: Double, text: String)?
    var maximum: (value: Double, text: String)?
    var minItems: Int64?
    var maxItems: Int64?
    var items: Int?
    var required: [String] = []
    /// Each property's node, and whether it is required: the members found while validating them say which required
    /// ones are there, without looking each up again (as many found as `required` names: all there).
    var properties: [String: (node: Int, isRequired: Bool)] = [:]
    var additional = Additional.anything
    var allOf: [Int]?
    var anyOf: [Int]?
    var oneOf: [Int]?
}

/// The JSON types a `type` keyword allows.
struct TypeSet: OptionSet, Sendable {
    let rawValue: UInt8
    static let string = TypeSet(rawValue: 1), boolean = TypeSet(rawValue: 2), null = TypeSet(rawValue: 4), array = TypeSet(rawValue: 8)
    static let object = TypeSet(rawValue: 16), number = TypeSet(rawValue: 32), integer = TypeSet(rawValue: 64)

    init(rawValue: UInt8) { self.rawValue = rawValue }

    /// The types `type` names; a name that is no JSON type admits nothing.
    init(_ type: JSONValue) {
        let names = type.arrayValue?.compactMap(\.stringValue) ?? type.stringValue.map { [$0] } ?? []
        var set: TypeSet = []
        for name in names {
            switch name {
            case "string": set.insert(.string)
            case "boolean": set.insert(.boolean)
            case "null": set.insert(.null)
            case "array": set.insert(.array)
            case "object": set.insert(.object)
            case "number": set.insert(.number)
            case "integer": set.insert(.integer)
            default: break
            }
        }
        self = set
    }

    func admits(_ instance: JSONValue) -> Bool {
        switch instance {
        case .string: contains(.string)
        case .bool: contains(.boolean)
        case .null: contains(.null)
        case .array: contains(.array)
        case .object: contains(.object)
        case .integer: contains(.number) || contains(.integer)
        // An integer is what the models hold: a whole number beyond Int64 (parsed as a `number`) is not one.
        case .number(let value): contains(.number) || (contains(.integer) && value.rounded() == value && abs(value) < 0x1p63)
        }
    }
}

/// A compiled `pattern`: without a regular-expression engine where `ClassSequencePattern` can, else ICU's.
enum PatternMatcher: Sendable {
    case classes(ClassSequencePattern)
    case regex(NSRegularExpression)

    func matches(_ text: String) -> Bool {
        switch self {
        case .classes(let pattern): pattern.matches(text)
        case .regex(let regex): regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
        }
    }
}

/// A compiled node as validation reads it: by reference, so that reading a keyword copies nothing else.
final class SchemaNode: Sendable {
    let keywords: CompiledNode
    init(_ keywords: CompiledNode) { self.keywords = keywords }
}

/// Every registered schema compiled, with the node each `$id` starts at.
struct CompiledSchemas: Sendable {
    let nodes: [SchemaNode]
    private(set) var roots: [String: Int] = [:]

    /// Compiles `schemas` (checked already, see `JSONSchemaRegistry.check`), keyed by `$id`.
    init(_ schemas: [String: JSONValue], patterns: [String: NSRegularExpression]) {
        var compiler = Compiler(schemas: schemas, patterns: patterns)
        // By the id itself (an id may hold a `#`), under the key a `$ref` to the whole document resolves to.
        for (id, schema) in schemas.sorted(by: { $0.key < $1.key }) { roots[id] = compiler.node(for: (id + "#", schema, id)) }
        nodes = compiler.nodes.map(SchemaNode.init)
    }

    private struct Compiler {
        let schemas: [String: JSONValue]
        let patterns: [String: PatternMatcher]
        var nodes: [CompiledNode] = []
        /// The node of each `$ref` target compiled so far, by document id and fragment.
        var targets: [String: Int] = [:]

        init(schemas: [String: JSONValue], patterns: [String: NSRegularExpression]) {
            self.schemas = schemas
            self.patterns = patterns.reduce(into: [:]) { compiled, entry in
                compiled[entry.key] = ClassSequencePattern(entry.key).map(PatternMatcher.classes) ?? .regex(entry.value)
            }
        }

        /// `#/$defs/name` within `rootID`, or `ID` / `ID#/$defs/name` of a registered schema.
        func target(reference: String, rootID: String) -> (key: String, schema: JSONValue, rootID: String)? {
            let parts = reference.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
            let documentID = parts.first.map(String.init).flatMap { $0.isEmpty ? nil : $0 } ?? rootID
            guard var node = schemas[documentID] else { return nil }
            let fragment = parts.count == 2 ? String(parts[1]) : ""
            for token in fragment.split(separator: "/") {
                let key = token.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
                guard let next = node.objectValue?[key] else { return nil }
                node = next
            }
            return (documentID + "#" + fragment, node, documentID)
        }

        /// The node of a reference target, compiled once; a target that refers back to itself gets its own index.
        mutating func node(for target: (key: String, schema: JSONValue, rootID: String)) -> Int {
            if let index = targets[target.key] { return index }
            targets[target.key] = nodes.count // what `compile` is about to take
            return compile(target.schema, rootID: target.rootID)
        }

        mutating func compile(_ schemaValue: JSONValue, rootID: String) -> Int {
            let index = nodes.count
            nodes.append(CompiledNode())
            var node = CompiledNode()
            guard case .object(let schema) = schemaValue else {
                node.constant = schemaValue.boolValue ?? true
                nodes[index] = node
                return index
            }
            if let reference = schema["$ref"]?.stringValue {
                if let target = target(reference: reference, rootID: rootID) {
                    node.reference = self.node(for: target)
                } else {
                    node.unresolvedReference = reference
                }
            }
            if let type = schema["type"] {
                node.types = TypeSet(type)
                node.typeDescription = JSONSchemaRegistry.describe(type)
            }
            node.enumOptions = schema["enum"]?.arrayValue
            node.constValue = schema["const"]
            node.minLength = schema["minLength"]?.int64Value
            node.maxLength = schema["maxLength"]?.int64Value
            if let pattern = schema["pattern"]?.stringValue, let matcher = patterns[pattern] { node.pattern = (pattern, matcher) }
            node.format = schema["format"]?.stringValue
            node.minimum = JSONSchemaRegistry.optionalDouble(schema["minimum"]).map { ($0, JSONSchemaRegistry.render(schema["minimum"]!)) }
            node.maximum = JSONSchemaRegistry.optionalDouble(schema["maximum"]).map { ($0, JSONSchemaRegistry.render(schema["maximum"]!)) }
            node.minItems = schema["minItems"]?.int64Value
            node.maxItems = schema["maxItems"]?.int64Value
            node.items = schema["items"].map { compile($0, rootID: rootID) }
            node.required = schema["required"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let required = Set(node.required)
            for (name, property) in schema["properties"]?.objectValue ?? [:] {
                node.properties[name] = (compile(property, rootID: rootID), required.contains(name))
            }
            switch schema["additionalProperties"] {
            case nil: node.additional = .anything
            case .bool(false): node.additional = .nothing
            case let additional?: node.additional = .schema(compile(additional, rootID: rootID))
            }
            node.allOf = schema["allOf"]?.arrayValue?.map { compile($0, rootID: rootID) }
            node.anyOf = schema["anyOf"]?.arrayValue?.map { compile($0, rootID: rootID) }
            node.oneOf = schema["oneOf"]?.arrayValue?.map { compile($0, rootID: rootID) }
            nodes[index] = node
            return index
        }
    }
}

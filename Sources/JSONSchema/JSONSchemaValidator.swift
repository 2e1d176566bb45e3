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
    private let compiled: CompiledSchemas
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
        compiled = CompiledSchemas(byID, patterns: patterns)
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
        guard let root = compiled.roots[id] else { return [Violation(path: "", message: "unknown schema \(id)")] }
        var validation = Validation(nodes: compiled.nodes, stopAtFirst: false)
        validation.validate(instance, root, depth: 0)
        return validation.violations
    }
}

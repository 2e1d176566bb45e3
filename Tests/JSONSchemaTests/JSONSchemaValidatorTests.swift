import JSON
import JSONSchema
import Testing

@Suite struct JSONSchemaValidatorTests {
    static func json(_ text: String) -> JSONValue { JSONValue.parse(Array(text.utf8))! }

    static let registry = try! JSONSchemaRegistry(schemas: [
        json(#"""
        {"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"urn:test:order:1","type":"object",
         "required":["id","kind","at","items"],"additionalProperties":false,
         "properties":{
           "id":{"type":"string","format":"uuid"},
           "kind":{"enum":["coins","pass"]},
           "version":{"const":1},
           "at":{"type":"string","format":"date-time"},
           "sku":{"type":"string","pattern":"^[a-z]+\\.[0-9]+$","minLength":3,"maxLength":20},
           "quantity":{"type":"integer","minimum":1,"maximum":10},
           "items":{"type":"array","minItems":1,"items":{"$ref":"#/$defs/item"}},
           "money":{"$ref":"urn:test:money:1"},
           "payload":{"oneOf":[{"type":"object","required":["token"],"properties":{"token":{"type":"string"}},"additionalProperties":false},
                               {"type":"object","required":["receipt"],"properties":{"receipt":{"type":"string"}},"additionalProperties":false}]},
           "note":{"anyOf":[{"type":"string"},{"type":"null"}]},
           "tags":{"allOf":[{"type":"array"},{"maxItems":2}]}
         },
         "$defs":{"item":{"type":"object","required":["sku"],"properties":{"sku":{"type":"string"}}}}}
        """#),
        json(#"{"$id":"urn:test:money:1","type":"object","required":["amount"],"properties":{"amount":{"type":"number","minimum":0}}}"#),
        json(#"{"$id":"urn:test:name:1","type":"string","minLength":2,"maxLength":3}"#),
        json(#"{"$id":"urn:test:undeclared:1","type":"object","required":["a","b"],"properties":{"a":{"type":"string"}}}"#),
    ])

    static let valid = #"{"id":"0f8fad5b-d9cb-469f-a165-70867728950e","kind":"coins","version":1,"at":"2026-11-29T10:00:00.5+01:00","sku":"coins.100","quantity":3,"items":[{"sku":"a"}],"money":{"amount":0.99},"payload":{"token":"t"},"note":null,"tags":["x"]}"#

    func violations(_ patch: (inout [String: JSONValue]) -> Void) -> [String] {
        var object = Self.json(Self.valid).objectValue!
        patch(&object)
        return Self.registry.validate(.object(object), against: "urn:test:order:1").map(\.description)
    }

    @Test func aValidInstancePasses() {
        #expect(Self.registry.validate(Self.json(Self.valid), against: "urn:test:order:1").isEmpty)
    }

    /// Lengths count characters (Unicode scalars), not bytes: 2 to 3 of them, whether of 1 or 4 bytes each.
    @Test func lengthsCountCharactersNotBytes() {
        func violations(_ text: String) -> [String] { Self.registry.validate(.string(text), against: "urn:test:name:1").map(\.description) }
        for text in ["ab", "abc", "éé", "ééé", "😀😀", "😀😀😀", "a😀"] { #expect(violations(text).isEmpty, "\(text)") }
        for text in ["a", "é", "😀"] { #expect(violations(text) == ["/: shorter than 2 characters"], "\(text)") }
        for text in ["abcd", "éééé", "😀😀😀😀", "abc😀"] { #expect(violations(text) == ["/: longer than 3 characters"], "\(text)") }
    }

    @Test func eachKeywordCatchesItsViolation() {
        #expect(violations { $0["id"] = nil } == ["/: missing required property 'id'"])
        #expect(violations { $0["extra"] = .bool(true) } == ["/extra: property 'extra' is not allowed"])
        #expect(violations { $0["id"] = .string("not-a-uuid") } == ["/id: not a valid uuid"])
        #expect(violations { $0["kind"] = .string("gems") } == [#"/kind: must be one of "coins", "pass""#])
        #expect(violations { $0["version"] = .integer(2) } == ["/version: must be 1"])
        #expect(violations { $0["at"] = .string("2026-11-29 10:00") } == ["/at: not a valid date-time"])
        #expect(violations { $0["sku"] = .string("Coins.100") } == [#"/sku: does not match ^[a-z]+\.[0-9]+$"#])
        #expect(violations { $0["sku"] = .string("a.1") }.isEmpty)
        #expect(violations { $0["sku"] = .string("abcdefghijklmnopqr.12345") } == ["/sku: longer than 20 characters"])
        #expect(violations { $0["quantity"] = .integer(0) } == ["/quantity: less than 1"])
        #expect(violations { $0["quantity"] = .integer(11) } == ["/quantity: greater than 10"])
        #expect(violations { $0["quantity"] = .number(1.5) } == ["/quantity: expected integer, found number"])
        #expect(violations { $0["quantity"] = .number(3) }.isEmpty, "a whole number written as 3.0 is an integer")
        #expect(violations { $0["quantity"] = .number(1e19) } == ["/quantity: expected integer, found number"], "beyond Int64: no model holds it")
        #expect(violations { $0["quantity"] = .string("3") } == ["/quantity: expected integer, found string"])
        #expect(violations { $0["items"] = .array([]) } == ["/items: fewer than 1 items"])
        #expect(violations { $0["items"] = .array([.object([:])]) } == ["/items/0: missing required property 'sku'"])
        #expect(violations { $0["money"] = .object(["amount": .integer(-1)]) } == ["/money/amount: less than 0"])
        #expect(violations { $0["payload"] = .object(["token": .string("t"), "receipt": .string("r")]) }.count == 1)
        #expect(violations { $0["payload"] = .object(["receipt": .string("r")]) }.isEmpty)
        #expect(violations { $0["note"] = .integer(1) } == ["/note: matches none of anyOf"])
        #expect(violations { $0["tags"] = .array([.string("a"), .string("b"), .string("c")]) } == ["/tags: more than 2 items"])
    }

    /// Required properties found as the members are validated, and those missing reported first, in the schema's order,
    /// whether the schema declares them as properties or only requires them.
    @Test func missingRequiredPropertiesComeFirstInTheSchemasOrder() {
        #expect(violations { $0["items"] = nil; $0["id"] = nil; $0["quantity"] = .integer(0) }
                == ["/: missing required property 'id'", "/: missing required property 'items'", "/quantity: less than 1"])
        func undeclared(_ text: String) -> [String] {
            Self.registry.validate(Self.json(text), against: "urn:test:undeclared:1").map(\.description)
        }
        #expect(undeclared(#"{"a":"x","b":1}"#).isEmpty)
        #expect(undeclared(#"{"a":"x"}"#) == ["/: missing required property 'b'"])
        #expect(undeclared(#"{"b":1}"#) == ["/: missing required property 'a'"])
        #expect(undeclared(#"{"a":1}"#) == ["/: missing required property 'b'", "/a: expected string, found integer"])
    }

    /// Schemas are compiled once; a schema that refers to itself stays one node, and a violation deep in an instance is
    /// reported with its whole path. Several violations come in the order of the members' names.
    @Test func recursiveSchemasValidateToAnyDepthAndViolationsComeInNameOrder() throws {
        let tree = try JSONSchemaRegistry(schemas: [Self.json(#"""
            {"$id":"urn:test:tree:1","type":"object","required":["name"],"additionalProperties":false,
             "properties":{"name":{"type":"string","pattern":"^[a-z]+$"},"children":{"type":"array","items":{"$ref":"urn:test:tree:1"}}}}
            """#)])
        func node(_ depth: Int, leafName: String) -> JSONValue {
            depth == 0 ? .object(["name": .string(leafName)])
                : .object(["name": .string("n"), "children": .array([.object(["name": .string("x")]), node(depth - 1, leafName: leafName)])])
        }
        #expect(tree.validate(node(20, leafName: "leaf"), against: "urn:test:tree:1").isEmpty)
        // A schema is found by its id as written, `#` and all.
        let hashed = try JSONSchemaRegistry(schemas: [Self.json(#"{"$id":"urn:test:hashed:1#","type":"string"}"#)])
        #expect(hashed.validate(.string("x"), against: "urn:test:hashed:1#").isEmpty)
        #expect(hashed.validate(.integer(1), against: "urn:test:hashed:1#").map(\.description) == ["/: expected string, found integer"])
        let deep = tree.validate(node(3, leafName: "Leaf"), against: "urn:test:tree:1").map(\.description)
        #expect(deep == ["/children/1/children/1/children/1/name: does not match ^[a-z]+$"])
        let several = violations {
            $0["zeta"] = .integer(1)
            $0["quantity"] = .integer(0)
            $0["alpha"] = .integer(1)
            $0["kind"] = .string("gems")
        }
        #expect(several == [#"/alpha: property 'alpha' is not allowed"#, #"/kind: must be one of "coins", "pass""#,
                            "/quantity: less than 1", "/zeta: property 'zeta' is not allowed"])
    }

    @Test func unsupportedKeywordsAndBadPatternsAreRefused() {
        #expect(throws: JSONSchemaRegistry.SchemaError.self) {
            try JSONSchemaRegistry(schemas: [Self.json(#"{"$id":"urn:x","type":"object","patternProperties":{}}"#)])
        }
        #expect(throws: JSONSchemaRegistry.SchemaError.self) {
            try JSONSchemaRegistry(schemas: [Self.json(#"{"$id":"urn:x","type":"string","pattern":"("}"#)])
        }
    }
}

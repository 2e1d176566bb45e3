import JSON

/// One validation of an instance against compiled schemas. The instance path is a stack of tokens, rendered as a JSON
/// pointer only for a violation, so that a valid instance builds no strings.
struct Validation {
    enum PathToken {
        case name(String)
        case index(Int)
    }

    static let maxDepth = 64

    let nodes: [SchemaNode]
    /// For `anyOf`/`oneOf` branches, where only whether there is a violation matters.
    let stopAtFirst: Bool
    var path: [PathToken] = []
    var violations: [JSONSchemaRegistry.Violation] = []

    init(nodes: [SchemaNode], stopAtFirst: Bool) {
        self.nodes = nodes
        self.stopAtFirst = stopAtFirst
    }

    private var stopped: Bool { stopAtFirst && !violations.isEmpty }

    private var renderedPath: String {
        var text = ""
        for token in path {
            switch token {
            case .name(let name): text += "/" + JSONSchemaRegistry.escape(name)
            case .index(let index): text += "/" + String(index)
            }
        }
        return text
    }

    private mutating func fail(_ message: String) {
        violations.append(JSONSchemaRegistry.Violation(path: renderedPath, message: message))
    }

    mutating func validate(_ instance: JSONValue, _ index: Int, depth: Int) {
        guard depth < Self.maxDepth else {
            fail("schema nesting too deep")
            return
        }
        // Keywords read through the node (a class) one by one: bound to a local, the whole struct was copied, each of
        // its arrays, strings and dictionaries retained and released, at every value of every instance.
        let schema = nodes[index]
        if let constant = schema.keywords.constant {
            if !constant { fail("no value is allowed here") }
            return
        }
        if let reference = schema.keywords.reference {
            validate(instance, reference, depth: depth + 1)
        } else if let unresolved = schema.keywords.unresolvedReference {
            fail("unresolvable $ref \(unresolved)")
        }
        if stopped { return }
        if let types = schema.keywords.types, !types.admits(instance) {
            fail("expected \(schema.keywords.typeDescription), found \(JSONSchemaRegistry.typeName(instance))")
            return // Other keywords would only repeat the type mismatch.
        }
        if let options = schema.keywords.enumOptions, !options.contains(where: { JSONSchemaRegistry.equal($0, instance) }) {
            fail("must be one of \(options.map(JSONSchemaRegistry.render).joined(separator: ", "))")
        }
        if let constant = schema.keywords.constValue, !JSONSchemaRegistry.equal(constant, instance) {
            fail("must be \(JSONSchemaRegistry.render(constant))")
        }
        switch instance {
        case .string(let text):
            let (minimum, maximum) = (schema.keywords.minLength, schema.keywords.maxLength)
            if minimum != nil || maximum != nil {
                // A string has at least a quarter as many characters (Unicode scalars) as UTF-8 bytes and at most as many:
                // counted one by one (a walk through it) only when the byte count does not settle it.
                let bytes = Int64(text.utf8.count)
                let settled = (minimum.map { (bytes + 3) / 4 >= $0 } ?? true) && (maximum.map { bytes <= $0 } ?? true)
                let length = settled ? nil : Int64(text.unicodeScalars.count)
                if let minimum, let length, length < minimum { fail("shorter than \(minimum) characters") }
                if let maximum, let length, length > maximum { fail("longer than \(maximum) characters") }
            }
            if let pattern = schema.keywords.pattern, !pattern.matcher.matches(text) { fail("does not match \(pattern.text)") }
            if let format = schema.keywords.format, !JSONSchemaRegistry.conforms(text, to: format) { fail("not a valid \(format)") }
        case .integer, .number:
            let number = JSONSchemaRegistry.double(instance)
            if let minimum = schema.keywords.minimum, number < minimum.value { fail("less than \(minimum.text)") }
            if let maximum = schema.keywords.maximum, number > maximum.value { fail("greater than \(maximum.text)") }
        case .array(let elements):
            if let minimum = schema.keywords.minItems, elements.count < minimum { fail("fewer than \(minimum) items") }
            if let maximum = schema.keywords.maxItems, elements.count > maximum { fail("more than \(maximum) items") }
            if let items = schema.keywords.items {
                for (offset, element) in elements.enumerated() {
                    path.append(.index(offset))
                    validate(element, items, depth: depth + 1)
                    path.removeLast()
                    if stopped { return }
                }
            }
        case .object(let members):
            validateMembers(members, schema, depth: depth)
        default:
            break
        }
        if stopped { return }
        for subschema in schema.keywords.allOf ?? [] {
            validate(instance, subschema, depth: depth + 1)
            if stopped { return }
        }
        if let any = schema.keywords.anyOf, !any.contains(where: { isValid(instance, $0, depth: depth) }) {
            fail("matches none of anyOf")
        }
        if let one = schema.keywords.oneOf {
            let matching = one.filter { isValid(instance, $0, depth: depth) }.count
            if matching != 1 {
                if stopAtFirst {
                    fail("matches \(matching) of oneOf, expected exactly 1")
                    return
                }
                // Say why for the closest branch: the one with the fewest violations.
                let nearest = one.map { branch -> [JSONSchemaRegistry.Violation] in
                    var branchValidation = Validation(nodes: nodes, stopAtFirst: false)
                    branchValidation.path = path
                    branchValidation.validate(instance, branch, depth: depth + 1)
                    return branchValidation.violations
                }.min { $0.count < $1.count } ?? []
                if matching == 0, !nearest.isEmpty {
                    violations.append(contentsOf: nearest)
                } else {
                    fail("matches \(matching) of oneOf, expected exactly 1")
                }
            }
        }
    }

    /// The members of an object, each against its property's schema or `additionalProperties`. The violations come in the
    /// order of the members' names, whatever order the object holds them in; sorted only when there are any.
    private mutating func validateMembers(_ members: [String: JSONValue], _ schema: SchemaNode, depth: Int) {
        var failed: [(name: String, violations: ArraySlice<JSONSchemaRegistry.Violation>)] = []
        var requiredFound = 0
        for (name, value) in members {
            let before = violations.count
            path.append(.name(name))
            if let property = schema.keywords.properties[name] {
                if property.isRequired { requiredFound += 1 }
                validate(value, property.node, depth: depth + 1)
            } else {
                switch schema.keywords.additional {
                case .anything: break
                case .nothing: fail("property '\(name)' is not allowed")
                case .schema(let additional): validate(value, additional, depth: depth + 1)
                }
            }
            path.removeLast()
            if violations.count > before {
                if stopAtFirst { return }
                failed.append((name, violations[before...]))
                violations.removeSubrange(before...)
            }
        }
        // Missing required properties first, as the schema lists them; looked up one by one only when fewer required
        // members were found than the schema names (a name it requires but does not declare is never found that way).
        if requiredFound < schema.keywords.required.count {
            for name in schema.keywords.required where members[name] == nil { fail("missing required property '\(name)'") }
        }
        for member in failed.sorted(by: { $0.name < $1.name }) { violations.append(contentsOf: member.violations) }
    }

    private func isValid(_ instance: JSONValue, _ index: Int, depth: Int) -> Bool {
        var branch = Validation(nodes: nodes, stopAtFirst: true)
        branch.validate(instance, index, depth: depth + 1)
        return branch.violations.isEmpty
    }
}

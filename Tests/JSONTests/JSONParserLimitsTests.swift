import JSON
import TestData
import Testing

/// `JSONValue.parseDocument`'s `maxValues` (the most values a parse builds) and `keeping` (a top-level object reduced to
/// some members as it is parsed, the others checked and dropped unbuilt).
struct JSONParserLimitsTests {
    @Test func moreValuesThanTheLimitAreRefusedAndTheLimitItselfIsNot() {
        // [[0],[0],[0]]: the outer array, three inner ones, three numbers.
        let document = Array("[[0],[0],[0]]".utf8)
        #expect(JSONValue.parseDocument(document, maxValues: 7) == .success(.array(Array(repeating: .array([.integer(0)]), count: 3))))
        #expect(JSONValue.parseDocument(document, maxValues: 6) == .failure(.tooManyValues(6)))
        #expect(JSONValue.parseDocument(Array(#"{"a":"x","b":{"c":null}}"#.utf8), maxValues: 4) == .success(
            .object(["a": .string("x"), "b": .object(["c": .null])])))
        #expect(JSONValue.parseDocument(Array(#"{"a":"x","b":{"c":null}}"#.utf8), maxValues: 3) == .failure(.tooManyValues(3)))
        #expect(JSONParseError.tooManyValues(3).reason == "tooManyValues")
        // Found as it parses: a huge document stops at the limit (a value per 2 bytes here, as an attacker writes it).
        let flood = Array(("[" + Array(repeating: "[0]", count: 200_000).joined(separator: ",") + "]").utf8)
        #expect(JSONValue.parseDocument(flood, maxValues: 256) == .failure(.tooManyValues(256)))
    }

    @Test func aReducedObjectKeepsItsNamedMembersAndChecksTheOthers() {
        let body = Array(#"{"extra":[[0],[0],{"k":"v","k":"w"}],"signedPayload":"a.b.c","more":{"x":[true,false,null,-1.5e3,"\u00e9"]}}"#.utf8)
        // The dropped members are not built, so they count nothing against the limit and their duplicate key is not looked at.
        #expect(JSONValue.parseDocument(body, maxValues: 2, keeping: ["signedPayload"]) == .success(.object(["signedPayload": .string("a.b.c")])))
        #expect(JSONValue.parseDocument(body, keeping: []) == .success(.object([:])))
        // A kept member is built as always: counted, and refused when named twice.
        #expect(JSONValue.parseDocument(body, maxValues: 1, keeping: ["signedPayload"]) == .failure(.tooManyValues(1)))
        let twice = Array(#"{"signedPayload":"a.b.c","x":0,"signedPayload":"d.e.f"}"#.utf8)
        #expect(JSONValue.parseDocument(twice, keeping: ["signedPayload"]) == .failure(.duplicateKey("signedPayload")))
        // A document that is not an object is parsed as it is, within the limit.
        #expect(JSONValue.parseDocument(Array("[1,2]".utf8), maxValues: 3, keeping: ["signedPayload"]) == .success(.array([.integer(1), .integer(2)])))
        // Still checked: grammar, nesting, strings.
        for refused in [#"{"signedPayload":"a.b.c","x":[0,]}"#, #"{"signedPayload":"a.b.c","x":"\q"}"#, #"{"signedPayload":"a.b.c","x":{"a" 1}}"#,
                        #"{"signedPayload":"a.b.c","x":tru}"#, #"{"signedPayload":"a.b.c","x":01}"#, #"{"signedPayload":"a.b.c","x":"\ud800"}"#] {
            #expect((try? JSONValue.parseDocument(Array(refused.utf8), keeping: ["signedPayload"]).get()) == nil, "\(refused)")
        }
        let invalidUTF8 = Array(#"{"signedPayload":"a.b.c","x":""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8)
        #expect((try? JSONValue.parseDocument(invalidUTF8, keeping: ["signedPayload"]).get()) == nil)
        let deep = Array(#"{"signedPayload":"a.b.c","x":"#.utf8) + Array(repeating: UInt8(ascii: "["), count: 200) + Array(repeating: UInt8(ascii: "]"), count: 200) + [UInt8(ascii: "}")]
        #expect(JSONValue.parseDocument(deep, keeping: ["signedPayload"]) == .failure(.tooDeep(128)))
    }

    /// A document reduced as it is parsed is refused exactly when it is parsed whole, at the same byte and for the same
    /// reason (but for a key named twice inside a dropped member, which only the whole parse looks at), and keeps what the
    /// whole parse finds under the kept names: random documents and random edits of them, seeded.
    @Test func aReducedParseAgreesWithTheWholeParse() {
        var rng = SeededGenerator(seed: 0x5EED_D80B)
        let alphabet = Array(#"{}[]",:0123456789-+.eEtrufalsn\u"kep "#.utf8)
        func value(_ depth: Int) -> String {
            switch Int.random(in: 0..<(depth > 0 ? 8 : 5), using: &rng) {
            case 0: return String(Int.random(in: -99...99, using: &rng))
            case 1: return ["1.5", "-0.25e3", "0", "2E-2"].randomElement(using: &rng)!
            case 2: return [#""""#, #""a""#, #""\n\u00e9\"""#, #""\ud83d\ude00""#].randomElement(using: &rng)!
            case 3: return ["true", "false", "null"].randomElement(using: &rng)!
            case 4: return "[]"
            case 5, 6: return "[" + (0..<Int.random(in: 1...3, using: &rng)).map { _ in value(depth - 1) }.joined(separator: ",") + "]"
            default: // keys of three names: some objects name one twice
                return "{" + (0..<Int.random(in: 1...3, using: &rng)).map { _ in "\"k\(Int.random(in: 0...2, using: &rng))\":" + value(depth - 1) }.joined(separator: ",") + "}"
            }
        }
        var outcomes: [String: Int] = [:]
        for round in 0..<20_000 {
            var document = Array(#"{"keep":"#.utf8) + Array(value(2).utf8) + Array(#","drop":"#.utf8) + Array(value(5).utf8) + [UInt8(ascii: "}")]
            if round % 2 == 1 { document = mutate(document, alphabet: alphabet, using: &rng) }
            let whole = JSONValue.parseDocument(document, maxDepth: 4)
            let reduced = JSONValue.parseDocument(document, maxDepth: 4, keeping: ["keep"])
            let text = String(decoding: document, as: UTF8.self)
            switch whole {
            case .success(.object(let object)):
                #expect(reduced == .success(.object(object.filter { $0.key == "keep" })), "\(text)")
                outcomes["accepted", default: 0] += 1
            case .success:
                #expect(reduced == whole, "not an object: parsed whole either way: \(text)")
            case .failure(.duplicateKey):
                // Either way refused past the duplicate, or accepted without looking at it.
                if case .success(let object) = reduced { #expect(object.objectValue?.keys.allSatisfy { $0 == "keep" } == true, "\(text)") }
                outcomes["duplicateKey", default: 0] += 1
            case .failure(let refusal):
                #expect(reduced == .failure(refusal), "\(text)")
                outcomes[refusal.reason, default: 0] += 1
            }
        }
        // Each kind of outcome was met, often.
        #expect(["accepted", "duplicateKey", "invalidJSON", "tooDeep"].allSatisfy { outcomes[$0, default: 0] >= 100 }, "\(outcomes)")
    }
}

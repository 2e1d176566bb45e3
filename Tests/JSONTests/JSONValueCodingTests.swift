import Foundation
import JSON
import Testing

/// `JSONValueEncoder` and `JSONValueDecoder`: `Codable` types to and from a parsed value, strict about types and ranges.
struct JSONValueCodingTests {
    struct Inner: Codable, Equatable {
        var code: String
        var amount: Int64?
    }
    struct Sample: Codable, Equatable {
        enum Kind: String, Codable { case currency, entitlement }
        var text: String
        var count: Int
        var small: UInt8
        var ratio: Double
        var flag: Bool
        var when: Date
        var kind: Kind
        var optional: String?
        var inners: [Inner]
        var nested: [String: [Int]]
        var raw: JSONValue
    }

    static let sample = Sample(text: "a/b \"é\"", count: -3, small: 255, ratio: 0.25, flag: true, when: Date(timeIntervalSince1970: 1_764_410_000.5),
                               kind: .entitlement, optional: nil, inners: [Inner(code: "c", amount: 5), Inner(code: "d")],
                               nested: ["x": [1, 2], "y": []], raw: .object(["k": .array([.null, .bool(false)])]))

    @Test func aValueReadsBackAsItselfAndLeavesOutWhatIsNil() throws {
        let value = try JSONValueEncoder().encode(Self.sample)
        let object = try #require(value.objectValue)
        #expect(object["optional"] == nil, "nil optionals are left out")
        #expect(object["when"] == .string("2025-11-29T09:53:20.500Z"))
        #expect(object["kind"] == .string("entitlement"))
        #expect(object["inners"]?.arrayValue?.last == .object(["code": .string("d")]))
        #expect(try JSONValueDecoder().decode(Sample.self, from: value) == Self.sample)
        // Through the bytes too, as a consumer reads them.
        #expect(try JSONValueDecoder().decode(Sample.self, from: try #require(JSONValue.parse(value.serialized))) == Self.sample)
    }

    @Test func wrongTypesMissingKeysAndOutOfRangeNumbersAreErrorsThatSayWhere() throws {
        let valid = try #require(try JSONValueEncoder().encode(Self.sample).objectValue)
        func error(_ change: (inout [String: JSONValue]) -> Void) -> DecodingError? {
            var object = valid
            change(&object)
            do {
                _ = try JSONValueDecoder().decode(Sample.self, from: .object(object))
                return nil
            } catch let error as DecodingError {
                return error
            } catch {
                return nil
            }
        }
        func path(_ error: DecodingError?) -> String? {
            switch error {
            case .typeMismatch(_, let context), .dataCorrupted(let context), .keyNotFound(_, let context), .valueNotFound(_, let context):
                context.codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: "/")
            default: nil
            }
        }
        if case .typeMismatch = error({ $0["count"] = .string("3") }) {} else { Issue.record("a string is not a number") }
        if case .typeMismatch = error({ $0["text"] = .integer(3) }) {} else { Issue.record("a number is not a string") }
        if case .keyNotFound(let key, _) = error({ $0["text"] = nil }) { #expect(key.stringValue == "text") } else { Issue.record("missing key") }
        #expect(path(error({ $0["small"] = .integer(256) })) == "small", "out of UInt8's range")
        #expect(path(error({ $0["count"] = .number(1.5) })) == "count", "not an integer")
        #expect(path(error({ $0["when"] = .string("yesterday") })) == "when", "not RFC 3339")
        #expect(path(error({ $0["kind"] = .string("coupon") })) == "kind", "not a case")
        #expect(path(error({ $0["inners"] = .array([.object(["code": .bool(true)])]) })) == "inners/0/code")
        #expect(path(error({ $0["nested"] = .object(["x": .array([.integer(1), .null])]) })) == "nested/x/1")
        #expect(error({ $0["optional"] = .null }) == nil, "null is nil")
        #expect(error({ $0["count"] = .number(7) }) == nil, "an integral number is an integer")
    }

    struct Optionals: Codable, Equatable {
        var text: String?
        var count: Int?
        var big: Int64?
        var flag: Bool?
        var when: Date?
        var kind: Sample.Kind?
        var small: UInt8?
    }

    /// Optional members, each kind the decoder reads in one lookup: present, absent, null, of the wrong type.
    @Test func optionalMembersArePresentAbsentOrNullAndStillCheckedForType() throws {
        let full = Optionals(text: "t", count: -2, big: .max, flag: false, when: Date(timeIntervalSince1970: 1_764_410_000), kind: .currency, small: 7)
        let value = try JSONValueEncoder().encode(full)
        #expect(try JSONValueDecoder().decode(Optionals.self, from: value) == full)
        #expect(try JSONValueDecoder().decode(Optionals.self, from: .object([:])) == Optionals())
        let nulls = JSONValue.object(Dictionary(uniqueKeysWithValues: ["text", "count", "big", "flag", "when", "kind", "small"].map { ($0, JSONValue.null) }))
        #expect(try JSONValueDecoder().decode(Optionals.self, from: nulls) == Optionals())
        #expect(try JSONValueDecoder().decode(Optionals.self, from: .object(["count": .number(7)])) == Optionals(count: 7))
        let wrong: [String: JSONValue] = ["text": .integer(1), "count": .string("1"), "big": .number(0.5), "flag": .string("no"),
                                          "when": .string("later"), "kind": .string("coupon"), "small": .integer(256)]
        for (key, bad) in wrong {
            do {
                _ = try JSONValueDecoder().decode(Optionals.self, from: .object([key: bad]))
                Issue.record("\(key): \(bad) was accepted")
            } catch let error as DecodingError {
                switch error {
                case .typeMismatch(_, let context), .dataCorrupted(let context):
                    #expect(context.codingPath.map(\.stringValue) == [key])
                default: Issue.record("\(key): \(error)")
                }
            }
        }
    }

    class Base: Codable, @unchecked Sendable { // @unchecked: immutable after init, only read by the test that made it
        let name: String
        init(name: String) { self.name = name }
    }
    final class Derived: Base, @unchecked Sendable { // @unchecked: as Base
        let level: Int
        enum CodingKeys: String, CodingKey { case level }
        init(name: String, level: Int) {
            self.level = level
            super.init(name: name)
        }
        required init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            level = try container.decode(Int.self, forKey: .level)
            try super.init(from: container.superDecoder())
        }
        override func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(level, forKey: .level)
            try super.encode(to: container.superEncoder())
        }
    }

    /// A subclass's superclass part goes under `super`, as Foundation puts it, and comes back from there.
    @Test func aSuperclassIsEncodedUnderSuperAndReadBackFromIt() throws {
        let value = try JSONValueEncoder().encode(Derived(name: "n", level: 3))
        #expect(value == .object(["level": .integer(3), "super": .object(["name": .string("n")])]))
        let decoded = try JSONValueDecoder().decode(Derived.self, from: value)
        #expect(decoded.name == "n" && decoded.level == 3)
    }

    @Test func valuesJSONCannotHoldAreRefused() {
        #expect(throws: EncodingError.self) { try JSONValueEncoder().encode([Double.nan]) }
        #expect(throws: EncodingError.self) { try JSONValueEncoder().encode(["big": UInt64.max]) }
        #expect((try? JSONValueEncoder().encode([UInt64(Int64.max)])) == .array([.integer(Int64.max)]))
    }
}

import Foundation
import JSON
import JSONSchema
import Testing
import TestSupport

/// Every integer the schemas allow is bounded, so that what the pipeline adds up cannot overflow a 64-bit integer: an
/// adjustment of the extremes a 64-bit integer holds, a product or a balance past its bound, is a schema violation.
@Suite struct NumberBoundsSchemaTests {
    static let registry = try! JSONSchemaRegistry(directory: EventSchemaTests.directory)

    /// Where in `schema` an integer is allowed without both bounds, or with a bound a 64-bit integer does not hold.
    static func unbounded(_ schema: JSONValue, at path: String = "") -> [String] {
        switch schema {
        case .object(let members):
            var found: [String] = []
            let types = members["type"].map { type -> [JSONValue] in type.arrayValue ?? [type] } ?? []
            if types.contains(.string("integer")) {
                let bounds = [members["minimum"], members["maximum"]].map { $0?.int64Value }
                if bounds.contains(where: { $0 == nil }) { found.append(path) }
            }
            for (key, value) in members { found += unbounded(value, at: path + "/" + key) }
            return found
        case .array(let elements):
            return elements.enumerated().flatMap { index, element in unbounded(element, at: path + "/\(index)") }
        default:
            return []
        }
    }

    @Test func everyIntegerOfEverySchemaIsBounded() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: EventSchemaTests.directory.path).filter { $0.hasSuffix(".schema.json") }
        #expect(files.count == 20)
        for file in files {
            let schema = try #require(JSONValue.parse(Array(try Data(contentsOf: EventSchemaTests.directory.appendingPathComponent(file)))), "\(file)")
            #expect(Self.unbounded(schema).isEmpty, "\(file): \(Self.unbounded(schema))")
        }
        // The walk finds what it looks for.
        #expect(Self.unbounded(.object(["properties": .object(["n": .object(["type": .string("integer"), "minimum": .integer(0)])])])) == ["/properties/n"])
    }

    static func adjustment(_ amount: JSONValue) -> JSONValue {
        .object(["adjustmentId": .string("a-1"), "userId": .string("bob"), "requestedBy": .string("support"), "reason": .string("ticket"),
                 "items": .array([.object(["kind": .string("currency"), "code": .string("coins"), "amount": amount])]),
                 "requestedAt": .string("2026-12-01T12:00:00Z")])
    }

    @Test func anAdjustmentGivesOrTakesAtMostTenToTheTwelve() {
        let id = "urn:iap-pipeline:schema:user.adjustment:v1"
        for amount in [Int64.min, .max, 1_000_000_000_001, -1_000_000_000_001] {
            #expect(Set(Self.registry.validate(Self.adjustment(.integer(amount)), against: id).map(\.path)) == ["/items/0/amount"], "\(amount)")
        }
        #expect(Set(Self.registry.validate(Self.adjustment(.number(9.3e18)), against: id).map(\.path)) == ["/items/0/amount"], "past Int64")
        for amount in [Int64(1_000_000_000_000), -1_000_000_000_000, -1, 500] {
            #expect(Self.registry.validate(Self.adjustment(.integer(amount)), against: id).isEmpty, "\(amount)")
        }
    }

    @Test func productsAndBalancesAreBounded() throws {
        func catalog(_ amount: Int64) -> JSONValue {
            .object(["appstore": .object(["coins": .object(["type": .string("consumable"), "currency": .string("coins"), "amount": .integer(amount)])])])
        }
        #expect(Self.registry.validate(catalog(1_000_000_000_000), against: "urn:iap-pipeline:schema:catalog:v1").isEmpty)
        #expect(!Self.registry.validate(catalog(1_000_000_000_001), against: "urn:iap-pipeline:schema:catalog:v1").isEmpty)

        var granted = try EventSchemaTests.example("item.granted.json").objectValue ?? [:]
        let item: JSONValue = .object(["kind": .string("currency"), "code": .string("coins"), "amount": .integer(100), "balance": .integer(1_000_000_000_000_000)])
        granted["items"] = .array([item])
        #expect(Self.registry.validate(.object(granted), against: "urn:iap-pipeline:schema:item.granted:v1").isEmpty)
        granted["items"] = .array([.object((item.objectValue ?? [:]).merging(["balance": .integer(1_000_000_000_000_001)]) { $1 })])
        #expect(Self.registry.validate(.object(granted), against: "urn:iap-pipeline:schema:item.granted:v1").map(\.path) == ["/items/0/balance"])

        var adjusted = try EventSchemaTests.example("user.adjusted.json").objectValue ?? [:]
        adjusted["outcome"] = .string("refused")
        adjusted["refusal"] = .string("amountOutOfRange")
        adjusted["items"] = .array([])
        #expect(Self.registry.validate(.object(adjusted), against: "urn:iap-pipeline:schema:user.adjusted:v1").isEmpty, "a refusal for an amount out of range")
    }
}

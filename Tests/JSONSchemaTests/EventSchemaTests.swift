import Foundation
import JSON
import JSONSchema
import Testing
import TestSupport

/// The schema files in schemas/: they load into the Swift validator, the documented examples
/// validate, and Python's jsonschema agrees independently.
@Suite struct EventSchemaTests {
    static let directory = TestServices.packageRoot.appendingPathComponent("schemas")

    static func example(_ name: String) throws -> JSONValue {
        try #require(JSONValue.parse(Array(try Data(contentsOf: directory.appendingPathComponent("examples/\(name)")))))
    }

    @Test func everyExampleValidatesAgainstItsSchema() throws {
        let registry = try JSONSchemaRegistry(directory: Self.directory)
        #expect(registry.ids.count == 12)
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.directory.appendingPathComponent("examples").path).sorted()
        #expect(files.count >= 13)
        for file in files {
            let parts = file.split(separator: ".")
            let id = [2, 1].map { "urn:iap-pipeline:schema:\(parts.prefix($0).joined(separator: ".")):v1" }.first { registry.ids.contains($0) }
            let schemaID = try #require(id, "no schema for \(file)")
            #expect(registry.validate(try Self.example(file), against: schemaID).isEmpty, "\(file)")
        }
    }

    @Test func submissionsMustCarryThePayloadOfTheirKind() throws {
        let registry = try JSONSchemaRegistry(directory: Self.directory)
        var submission = try Self.example("purchase.submitted.appstore.json").objectValue!
        let id = "urn:iap-pipeline:schema:purchase.submitted:v1"
        submission["signedTransaction"] = nil
        #expect(!registry.validate(.object(submission), against: id).isEmpty, "signedTransaction kind without the JWS")
        submission["kind"] = .string("appcoinsPurchase")
        submission["appcoins"] = .object(["packageName": .string("p"), "sku": .string("s"), "purchaseToken": .string("t")])
        #expect(!registry.validate(.object(submission), against: id).isEmpty, "appcoins payload under store appstore")
        submission["store"] = .string("appcoins")
        #expect(registry.validate(.object(submission), against: id).isEmpty)
        submission["userId"] = .string("")
        #expect(registry.validate(.object(submission), against: id).map(\.path) == ["/userId"])
    }

    @Test(TestServices.pythonTools) func pythonJSONSchemaAgrees() throws {
        let (status, text) = try runPythonSchemaCheck(python: try TestServices.requirePython())
        #expect(status == 0, "\(text)")
        #expect(text.contains("12 schemas valid"))
    }
}

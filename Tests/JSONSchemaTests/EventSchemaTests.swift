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
        #expect(registry.ids.count == 20)
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.directory.appendingPathComponent("examples").path).sorted()
        #expect(files.count >= 14)
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
        submission["appcoins"] = .object(["packageName": .string("p"), "sku": .string("s"), "purchaseToken": .string("t"),
                                          "purchaseData": .string(#"{"purchaseToken":"t"}"#), "signature": .string("c2ln")])
        #expect(!registry.validate(.object(submission), against: id).isEmpty, "appcoins payload under store appstore")
        submission["store"] = .string("appcoins")
        #expect(registry.validate(.object(submission), against: id).isEmpty)
        submission["store"] = .string("googleplay")
        #expect(!registry.validate(.object(submission), against: id).isEmpty, "appcoins payload under store googleplay")
        submission["kind"] = .string("googlePlayPurchase")
        submission["googleplay"] = .object(["packageName": .string("p"), "productId": .string("s"), "purchaseToken": .string("t"),
                                            "purchaseData": .string(#"{"purchaseToken":"t"}"#)])
        submission["appcoins"] = nil
        #expect(!registry.validate(.object(submission), against: id).isEmpty, "a Google Play purchase without its signature")
        var signed = submission["googleplay"]?.objectValue ?? [:]
        signed["signature"] = .string("c2ln")
        submission["googleplay"] = .object(signed)
        #expect(registry.validate(.object(submission), against: id).isEmpty)
        submission["userId"] = .string("")
        #expect(registry.validate(.object(submission), against: id).map(\.path) == ["/userId"])
    }

    @Test func theProducerContractsExamplesMatchTheSchemas() throws {
        let registry = try JSONSchemaRegistry(directory: Self.directory)
        let examples = try documentedBlocks(in: Self.directory.appendingPathComponent("README.md")).filter { $0.marker.hasPrefix("example: ") }
        var kinds: Set<String> = []
        for example in examples {
            let type = String(example.marker.dropFirst("example: ".count))
            let json = try #require(JSONValue.parse(Array(example.text.utf8)), "the \(type) example is JSON")
            #expect(registry.validate(json, against: "urn:iap-pipeline:schema:\(type):v1").isEmpty, "\(example.text)")
            kinds.insert(type + "/" + (json.objectValue?["kind"]?.stringValue ?? ""))
        }
        #expect(kinds == ["purchase.submitted/signedTransaction", "purchase.submitted/appReceipt", "purchase.submitted/appcoinsPurchase", "purchase.submitted/googlePlayPurchase",
                          "purchase.consumed/", "store.notification/", "user.consent/", "user.token/", "user.adjustment/"], "an example for every input topic and payload kind")
    }

    @Test(TestServices.pythonTools) func pythonJSONSchemaAgrees() throws {
        let (status, text) = try runPythonSchemaCheck(python: try TestServices.requirePython())
        #expect(status == 0, "\(text)")
        #expect(text.contains("20 schemas valid"))
    }
}

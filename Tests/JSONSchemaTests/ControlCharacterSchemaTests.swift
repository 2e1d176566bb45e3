import Foundation
import JSON
import JSONSchema
import Testing
import TestSupport

/// Every string the schemas let through that names something (an id, a code, who asked, why) refuses control characters,
/// as `common.v1.schema.json`'s ids do: such a value reaches the database (PostgreSQL takes no NUL in text) or a key, so
/// a message carrying one is dead-lettered as a `schemaViolation` with its reason, never a permanent database error.
@Suite struct ControlCharacterSchemaTests {
    static let registry = NumberBoundsSchemaTests.registry

    /// The strings kept as bytes and never stored by their value as text: signed data and its signature, free-text details
    /// published for people, the dead letter's original bytes, and paths in operators' files.
    static let opaque: Set<String> = [
        "apps.v1.schema.json /$defs/app/properties/catalog/anyOf/0", "apps.v1.schema.json /$defs/androidApp/properties/publicKeyFile",
        "webhooks.v1.schema.json /$defs/endpoint/properties/secretFile",
        "consumption.requested.v1.schema.json /properties/requestReason", "consumption.requested.v1.schema.json /properties/ownershipType",
        "deadletter.v1.schema.json /properties/detail", "deadletter.v1.schema.json /properties/sourceTopic", "deadletter.v1.schema.json /properties/key",
        "deadletter.v1.schema.json /properties/value", "deadletter.v1.schema.json /properties/headers/items/properties/key",
        "deadletter.v1.schema.json /properties/headers/items/properties/value",
        "purchase.rejected.v1.schema.json /properties/detail", "purchase.rejected.v1.schema.json /properties/causeId",
        "purchase.submitted.v1.schema.json /properties/signedTransaction", "purchase.submitted.v1.schema.json /properties/receipt",
        "purchase.submitted.v1.schema.json /properties/appcoins/properties/purchaseData", "purchase.submitted.v1.schema.json /properties/appcoins/properties/signature",
        "purchase.submitted.v1.schema.json /properties/googleplay/properties/purchaseData",
        "purchase.submitted.v1.schema.json /properties/googleplay/properties/signature",
        "purchase.verified.v1.schema.json /properties/productType",
        "store.notification.v1.schema.json /properties/signedPayload", "store.notification.v1.schema.json /properties/developerNotification",
        "store.notification.v1.schema.json /properties/stripeEvent",
        "user.adjusted.v1.schema.json /properties/detail",
    ]

    /// Where in `schema` a string is allowed with no pattern, format, enum or const.
    static func unpatterned(_ schema: JSONValue, at path: String = "") -> [String] {
        switch schema {
        case .object(let members):
            let types = members["type"].map { type -> [JSONValue] in type.arrayValue ?? [type] } ?? []
            var found: [String] = []
            if types.contains(.string("string")), !["pattern", "format", "enum", "const"].contains(where: { members[$0] != nil }) { found.append(path) }
            for (key, value) in members { found += unpatterned(value, at: path + "/" + key) }
            return found
        case .array(let elements):
            return elements.enumerated().flatMap { index, element in unpatterned(element, at: path + "/\(index)") }
        default:
            return []
        }
    }

    @Test func everyStringThatNamesSomethingHasAPattern() throws {
        let directory = EventSchemaTests.directory
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".schema.json") }
        var found: Set<String> = []
        for file in files {
            let schema = try #require(JSONValue.parse(Array(try Data(contentsOf: directory.appendingPathComponent(file)))), "\(file)")
            found.formUnion(Self.unpatterned(schema).map { "\(file) \($0)" })
        }
        #expect(found.subtracting(Self.opaque).isEmpty, "\(found.subtracting(Self.opaque).sorted())")
        #expect(Self.opaque.subtracting(found).isEmpty, "no longer opaque: \(Self.opaque.subtracting(found).sorted())")
        // The walk finds what it looks for.
        #expect(Self.unpatterned(.object(["properties": .object(["s": .object(["type": .string("string"), "maxLength": .integer(8)])])])) == ["/properties/s"])
    }

    static func consumptionRequested(notificationUUID: String) -> JSONValue {
        .object(["store": .string("appstore"), "transactionId": .string("2000000000000001"), "notificationUUID": .string(notificationUUID),
                 "requestedAt": .string("2026-12-01T12:00:00Z"), "answerBy": .string("2026-12-02T00:00:00Z")])
    }

    @Test func aNotificationIdWithAControlCharacterIsASchemaViolation() {
        let id = "urn:iap-pipeline:schema:consumption.requested:v1"
        for uuid in ["\u{0}", "a\u{0}b", "\u{7F}", "uuid\n", ""] {
            #expect(!Self.registry.validate(Self.consumptionRequested(notificationUUID: uuid), against: id).isEmpty, "\(Array(uuid.utf8))")
        }
        #expect(Self.registry.validate(Self.consumptionRequested(notificationUUID: "0f8fad5b-d9cb-469f-a165-70867728950e"), against: id).isEmpty)
        let revoked = JSONValue.object(["store": .string("appstore"), "transactionId": .string("1"), "reason": .string("REFUND"),
                                        "notificationUUID": .string("\u{0}"), "revokedAt": .string("2026-12-01T12:00:00Z")])
        #expect(!Self.registry.validate(revoked, against: "urn:iap-pipeline:schema:purchase.revoked:v1").isEmpty)
    }

    @Test func anAdjustmentsReasonMayBreakLinesButHoldsNoOtherControlCharacter() {
        func adjustment(reason: String, requestedBy: String = "support", code: String = "coins") -> JSONValue {
            .object(["adjustmentId": .string("a-1"), "userId": .string("bob"), "requestedBy": .string(requestedBy), "reason": .string(reason),
                     "items": .array([.object(["kind": .string("currency"), "code": .string(code), "amount": .integer(5)])]),
                     "requestedAt": .string("2026-12-01T12:00:00Z")])
        }
        let id = "urn:iap-pipeline:schema:user.adjustment:v1"
        #expect(Self.registry.validate(adjustment(reason: "ticket 17:\r\n\tgoodwill"), against: id).isEmpty)
        for reason in ["\u{0}", "ticket\u{1B}[31m", "\u{7F}"] {
            #expect(!Self.registry.validate(adjustment(reason: reason), against: id).isEmpty, "\(Array(reason.utf8))")
        }
        #expect(!Self.registry.validate(adjustment(reason: "ticket", requestedBy: "a\u{0}b"), against: id).isEmpty)
        #expect(!Self.registry.validate(adjustment(reason: "ticket", code: "coins\u{0}"), against: id).isEmpty)
    }
}

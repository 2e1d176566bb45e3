import Foundation
import JSON
import JSONSchema
import Kafka
import PurchaseEvents
import Testing
import TestSupport

@Suite struct EventCodecTests {
    static let schemas = try! JSONSchemaRegistry(directory: TestServices.packageRoot.appendingPathComponent("schemas"))
    static let codec = EventCodec(schemas: schemas, source: "/iap-pipeline/test")
    static let now = Date(timeIntervalSince1970: 1_764_410_000.25)

    /// One event of every type, as the stages emit them.
    static func samples() -> [(EventType, KafkaProducerMessage)] {
        let items = [GrantedItem(kind: .currency, code: "coins", amount: 200), GrantedItem(kind: .entitlement, code: "adfree")]
        let message = KafkaMessage(topic: "iap.purchase.submitted", partition: 2, offset: 77, key: Data("user-1".utf8), value: Data([0xFF, 0xFE]),
                                   headers: [KafkaHeader(key: "ce_type", string: "x"), KafkaHeader(key: "null", value: nil)])
        return [
            (.purchaseSubmitted, try! codec.message(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: "a.b.c",
                                                                      userId: "user-1", submittedAt: now, source: .client), time: now)),
            (.purchaseSubmitted, try! codec.message(PurchaseSubmitted(store: .appcoins, kind: .appcoinsPurchase,
                                                                      appcoins: .init(packageName: "com.example", sku: "coins.100", purchaseToken: "tok",
                                                                                      purchaseData: #"{"purchaseToken":"tok"}"#, signature: "c2ln"),
                                                                      userId: "user-1", submittedAt: now, source: .server,
                                                                      submissionId: "0f8fad5b-d9cb-469f-a165-70867728950e"), time: now)),
            (.storeNotification, try! codec.message(StoreNotificationReceived(signedPayload: "a.b.c", receivedAt: now), time: now)),
            (.purchaseConsumed, try! codec.message(PurchaseConsumed(store: .appcoins, transactionId: "o-1", userId: "user-1", consumedAt: now), time: now)),
            (.purchaseVerified, try! codec.message(PurchaseVerifiedEvent(store: .appstore, transactionId: "2000", productId: "coins.100", productType: "Consumable",
                                                                         quantity: 2, userId: "user-1", purchaseDate: now, environment: "Sandbox",
                                                                         price: 990, currency: "USD", source: .client, verifiedAt: now), time: now)),
            (.purchaseRejected, try! codec.message(PurchaseRejectedEvent(store: .appstore, userId: "user-1", reason: "badSignature", retryable: false,
                                                                         detail: "x", rejectedAt: now, causeID: "submitted:1"), time: now)),
            (.itemGranted, try! codec.message(ItemGranted(store: .appstore, transactionId: "2000", userId: "user-1", productId: "coins.100", quantity: 2,
                                                          items: items, alreadyGranted: false, ledgerEntryId: 5, grantedAt: now), time: now)),
            (.transactionFinished, try! codec.message(TransactionFinished(store: .appstore, transactionId: "2000", userId: "user-1",
                                                                          method: .appStoreServerAPI, finishedAt: now), time: now)),
            (.refundDue, try! codec.message(RefundDue(store: .appcoins, transactionId: "o-2", userId: "user-1", productId: "coins.100", state: "granted",
                                                      purchaseDate: now, deadline: now, flaggedAt: now), time: now)),
            (.purchaseRevoked, try! codec.message(PurchaseRevokedEvent(store: .appstore, transactionId: "2000", userId: "user-1", reason: .REFUND,
                                                                       revokedAt: now), time: now)),
            (.deadLetter, try! codec.message(DeadLetter(reason: "invalidUTF8", detail: "value is not UTF-8", stage: "verifier", message: message,
                                                        failedAt: now), time: now)),
        ]
    }

    @Test func everyEmittedEventCarriesCloudEventsHeadersAndMatchesItsSchema() throws {
        for (type, message) in Self.samples() {
            let headers = Dictionary(message.headers.map { ($0.key, $0.stringValue ?? "") }, uniquingKeysWith: { first, _ in first })
            #expect(headers["ce_specversion"] == "1.0")
            #expect(headers["ce_type"] == type.ceType)
            #expect(headers["ce_dataschema"] == type.schemaID)
            #expect(headers["content-type"] == "application/json")
            #expect(headers["ce_time"].flatMap(RFC3339.parse) != nil)
            #expect(!(headers["ce_id"] ?? "").isEmpty)
            #expect(message.topic == type.topic)
            let json = try #require(JSONValue.parse(Array(message.value ?? Data())))
            #expect(Self.schemas.validate(json, against: type.schemaID).isEmpty, "\(type): \(Self.schemas.validate(json, against: type.schemaID))")
        }
    }

    /// Stages route a message by the event type of its topic in their deployment, not by where the topic is in a list.
    @Test func aTopicNamesItsEventTypeInItsDeploymentOnly() {
        let staging = EventCodec(schemas: Self.schemas, source: "/test", topicPrefix: "staging.")
        for type in EventType.allCases {
            #expect(staging.eventType(ofTopic: staging.topic(type)) == type)
            #expect(Self.codec.eventType(ofTopic: Self.codec.topic(type)) == type)
        }
        #expect(staging.eventType(ofTopic: Self.codec.topic(.itemGranted)) == nil, "another deployment's topic")
        #expect(staging.eventType(ofTopic: staging.retryTopic) == nil, "the retry topic carries records of every type")
    }

    @Test func derivedEventIDsAreDeterministic() throws {
        let first = try Self.codec.message(ItemGranted(store: .appstore, transactionId: "2000", userId: "u", productId: "p", quantity: 1, items: [],
                                                       alreadyGranted: false, grantedAt: Self.now), time: Self.now)
        let again = try Self.codec.message(ItemGranted(store: .appstore, transactionId: "2000", userId: "u", productId: "p", quantity: 1, items: [],
                                                       alreadyGranted: true, grantedAt: Self.now.addingTimeInterval(60)), time: Self.now)
        #expect(first.headers.first { $0.key == "ce_id" }?.stringValue == "granted:appstore:2000")
        #expect(first.headers.first { $0.key == "ce_id" } == again.headers.first { $0.key == "ce_id" })
        #expect(first.key == Data("u".utf8), "keyed by user")
    }

    func consumed(_ produced: KafkaProducerMessage, value: Data?? = nil, dropHeader: String? = nil) -> KafkaMessage {
        KafkaMessage(topic: produced.topic, partition: 0, offset: 1, key: produced.key, value: value ?? produced.value,
                     headers: produced.headers.filter { $0.key != dropHeader })
    }

    @Test func decodingRoundTripsAndRefusesBadInputWithAReason() throws {
        let verified = PurchaseVerifiedEvent(store: .appstore, transactionId: "2000", productId: "coins.100", quantity: 1, userId: "user-1",
                                             source: .client, verifiedAt: Self.now)
        let produced = try Self.codec.message(verified, time: Self.now)
        #expect(try Self.codec.decode(consumed(produced), as: PurchaseVerifiedEvent.self).get() == verified)

        func reason(_ message: KafkaMessage) -> String? {
            if case .failure(let invalid) = Self.codec.decode(message, as: PurchaseVerifiedEvent.self) { return invalid.reason }
            return nil
        }
        #expect(reason(consumed(produced, value: .some(nil))) == "tombstone")
        #expect(reason(consumed(produced, value: Data(repeating: 0x20, count: EventCodec.maxMessageBytes + 1))) == "oversized")
        #expect(reason(consumed(produced, value: Data([0x7B, 0xFF, 0x7D]))) == "invalidUTF8")
        // Inside a string, plain or with escapes, and a truncated sequence: still not UTF-8, whatever else is wrong.
        for bytes: [UInt8] in [[0xFF], [0xC3], [0xED, 0xA0, 0x80], [0x5C, 0x6E, 0xFF], [0xF0, 0x9F, 0xA7]] {
            let document = Array(#"{"store":"appstore","userId":""#.utf8) + bytes + Array(#""}"#.utf8)
            #expect(reason(consumed(produced, value: Data(document))) == "invalidUTF8", "\(bytes)")
        }
        #expect(reason(consumed(produced, value: Data("{\"store\":".utf8))) == "invalidJSON")
        #expect(reason(consumed(produced, value: Data((String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)).utf8))) == "tooDeep")
        // One value for the schema, another for a decoder that keeps the other one: refused, whichever it would be.
        #expect(reason(consumed(produced, value: Data(#"{"store":"appstore","userId":"a","userId":"b"}"#.utf8))) == "duplicateKey")
        #expect(reason(consumed(produced, value: Data(#"{"store":"appstore"}"#.utf8))) == "schemaViolation")
        #expect(reason(consumed(produced, dropHeader: "ce_id")) == "missingCloudEventsHeaders")
        let other = try Self.codec.message(TransactionFinished(store: .appstore, transactionId: "1", userId: "u", method: .consumedByApp,
                                                               finishedAt: Self.now), time: Self.now)
        #expect(reason(consumed(other)) == "wrongEventType")
    }

    /// The codec writes from and reads into the typed events without `JSONEncoder`/`JSONDecoder`: every sample reads back
    /// as itself, and says what Foundation's encoder (the pipeline's writer until now) says for it, value for value.
    @Test func everyEventReadsBackAsItselfAndSaysWhatFoundationWouldWrite() throws {
        func check<Event: PipelineEvent & Equatable>(_ event: Event) throws {
            let produced = try Self.codec.message(event, time: Self.now)
            #expect(try Self.codec.decode(consumed(produced), as: Event.self).get() == event, "\(Event.self)")
            let foundation = JSONEncoder()
            foundation.dateEncodingStrategy = .custom { date, encoder in
                var container = encoder.singleValueContainer()
                try container.encode(RFC3339.format(date))
            }
            let ours = try JSONSerialization.jsonObject(with: try #require(produced.value)) as? NSDictionary
            let theirs = try JSONSerialization.jsonObject(with: try foundation.encode(event)) as? NSDictionary
            #expect(ours != nil && ours == theirs, "\(Event.self)")
        }
        let items = [GrantedItem(kind: .currency, code: "coins", amount: 200, balance: 1_200),
                     GrantedItem(kind: .entitlement, code: "pass", expiresAt: Self.now)]
        let message = KafkaMessage(topic: "iap.purchase.submitted", partition: 2, offset: 77, key: nil, value: Data("x".utf8),
                                   headers: [KafkaHeader(key: "null", value: nil)])
        try check(PurchaseSubmitted(store: .appcoins, kind: .appcoinsPurchase,
                                    appcoins: .init(packageName: "com.example", sku: "coins.100", purchaseToken: "tok",
                                                    purchaseData: #"{"purchaseToken":"tok","slash":"a/b"}"#, signature: nil),
                                    userId: "user-é/ü", submittedAt: Self.now, source: .restore, appAccountToken: "0f8fad5b-d9cb-469f-a165-70867728950e"))
        try check(PurchaseVerifiedEvent(store: .appstore, transactionId: "2000", originalTransactionId: "1999", productId: "pass.month",
                                        productType: "Auto-Renewable Subscription", quantity: 1, userId: "user-1", purchaseDate: Self.now,
                                        expiresDate: Self.now.addingTimeInterval(86_400), environment: "Production", price: 4_990,
                                        currency: "EUR", consumed: false, source: .server, verifiedAt: Self.now))
        try check(ItemGranted(store: .appstore, transactionId: "2000", userId: "user-1", productId: "bundle", quantity: 3, items: items,
                              alreadyGranted: true, ledgerEntryId: 9, grantedAt: Self.now))
        try check(PurchaseRejectedEvent(store: .appstore, userId: "user-1", reason: "badSignature", retryable: true, detail: nil,
                                        rejectedAt: Self.now, causeID: "submitted:1"))
        try check(DeadLetter(reason: "invalidUTF8", detail: "d", stage: "verifier", message: message, failedAt: Self.now))
    }

    @Test(TestServices.pythonTools) func pythonJSONSchemaAcceptsWhatTheCodecEmits() throws {
        let python = try TestServices.requirePython()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("emitted-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        for (index, (type, message)) in Self.samples().enumerated() {
            try message.value!.write(to: directory.appendingPathComponent("\(type.rawValue).\(index).json"))
        }
        let (status, text) = try runPythonSchemaCheck(python: python, instances: directory)
        #expect(status == 0, "\(text)")
        #expect(text.components(separatedBy: "\n").filter { $0.hasPrefix("ok ") }.count >= 13 + Self.samples().count)
    }

    /// With a small limit, a dead letter of a signed payload keeps its beginning, size and SHA-256 — enough to find
    /// the source message, not to submit the purchase again — and cannot be replayed as it was.
    @Test func aDeadLetterKeepsOnlyWhatItIsAllowedToOfTheValue() throws {
        let payload = Data(String(repeating: "eyJhbGciOiJFUzI1NiJ9.", count: 40).utf8)
        let message = KafkaMessage(topic: "iap.purchase.submitted", partition: 1, offset: 7, key: Data("u".utf8), value: payload, headers: [])
        let whole = DeadLetter(reason: "r", detail: "d", stage: "verifier", message: message, failedAt: Self.now)
        #expect(whole.value.flatMap { Data(base64Encoded: $0) } == payload)
        #expect(whole.originalMessage()?.value == payload)
        let redacted = DeadLetter(reason: "r", detail: "d", stage: "verifier", message: message, failedAt: Self.now, keepValueBytes: 16)
        #expect(redacted.value.flatMap { Data(base64Encoded: $0) } == payload.prefix(16))
        #expect(redacted.valueBytes == Int64(payload.count))
        #expect(redacted.valueSHA256 == whole.valueSHA256 && redacted.valueSHA256?.count == 64)
        #expect(redacted.valueTruncated == true)
        #expect(redacted.originalMessage() == nil, "not replayable from what it kept")
        let none = DeadLetter(reason: "r", detail: "d", stage: "verifier", message: message, failedAt: Self.now, keepValueBytes: 0)
        #expect(none.value == "" && none.valueSHA256 == whole.valueSHA256)
        #expect(try Self.codec.message(redacted, time: Self.now).value != nil, "still a valid dead letter")
    }
}

import CommandLineOptions
import Foundation
import PurchaseDomain
import JSON
import JSONSchema
import Kafka
import PurchaseEvents
import StoreVerification
import Synchronization

/// `iapctl submit`, `iapctl produce` and `iapctl tail`: feeding the pipeline and watching it by hand.
enum ProduceCommands {
    /// `submit --store S --kind K --user U [--signature SIG] [FILE|-]`: wraps a raw payload (JWS, base64
    /// receipt, or the AppCoins SDK's or Play Billing Library's purchase JSON with `--signature`) into a `purchase.submitted` event and publishes it.
    static func submit(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--store", "--kind", "--user", "--signature", "--source",
                                                             "--brokers", "--kafka", "--topic-prefix"])
        guard let store = options.string("--store").flatMap(Store.init(rawValue:)) else { throw UsageError("submit: --store appstore|appcoins|googleplay|stripe") }
        guard let kind = options.string("--kind").flatMap(SubmissionKind.init(rawValue:)) else {
            throw UsageError("submit: --kind signedTransaction|appReceipt|appcoinsPurchase|googlePlayPurchase|stripeCheckout")
        }
        guard let user = options.string("--user"), !user.isEmpty else { throw UsageError("submit: --user is required") }
        let source = try options.string("--source").map { text -> SubmissionSource in
            guard let source = SubmissionSource(rawValue: text) else { throw UsageError("--source must be client, server or restore") }
            return source
        } ?? .server
        let payload = try readCommandInput(options.positional.first ?? "-").trimmingCharacters(in: .whitespacesAndNewlines)
        var submission = PurchaseSubmitted(store: store, kind: kind, userId: UserID(user), submittedAt: Date(), source: source,
                                           submissionId: UUID().uuidString.lowercased())
        switch kind {
        case .signedTransaction: submission.signedTransaction = payload
        case .appReceipt: submission.receipt = payload
        case .appcoinsPurchase:
            // The input is the purchase JSON exactly as the billing SDK gave it; it names the package, SKU and token.
            guard let signature = options.string("--signature") else {
                throw UsageError("submit: an AppCoins purchase needs --signature (the SDK's base64 signature of the purchase JSON given as input)")
            }
            guard let (package, sku, token) = AndroidPurchaseData.names(in: payload) else {
                throw UsageError("submit: the input must be the AppCoins purchase JSON (packageName, productId, purchaseToken)")
            }
            submission.appcoins = .init(packageName: package, sku: sku, purchaseToken: token, purchaseData: payload, signature: signature)
        case .googlePlayPurchase:
            // The input is Purchase.getOriginalJson() exactly as the Play Billing Library gave it; it names the package, product and token.
            guard let signature = options.string("--signature") else {
                throw UsageError("submit: a Google Play purchase needs --signature (Purchase.getSignature() of the purchase JSON given as input)")
            }
            guard let (package, product, token) = AndroidPurchaseData.names(in: payload) else {
                throw UsageError("submit: the input must be the Google Play purchase JSON (packageName, productId, purchaseToken)")
            }
            submission.googleplay = .init(packageName: package, productId: product, purchaseToken: token, purchaseData: payload, signature: signature)
        case .stripeCheckout:
            // The input is the Checkout Session's id (cs_…), which the verifier reads back from Stripe.
            submission.stripe = .init(checkoutSessionId: payload)
        }
        let report = try await publish(submission, options, command: "submit")
        print("published \(submission.eventID) to \(report.topic)[\(report.partition)]@\(report.offset)")
        return 0
    }

    /// Publishes `event` to its topic (`--topic-prefix`, `--brokers`, `--kafka`) once it matches its schema — never what the
    /// pipeline would dead-letter — and waits for the broker's acknowledgement.
    static func publish<Event: PipelineEvent>(_ event: Event, _ options: CommandOptions, command: String) async throws -> KafkaDeliveryReport {
        let publisher = try EventPublisher(codec: EventCodec(schemas: try JSONSchemaRegistry.eventSchemas(), source: "/iapctl",
                                                             topicPrefix: options.string("--topic-prefix") ?? ""),
                                       kafka: try options.kafkaConfiguration())
        let published: Result<KafkaDeliveryReport, any Error>
        do { published = .success(try await publisher.publish(event)) } catch { published = .failure(error) }
        await publisher.shutdown()
        do {
            return try published.get()
        } catch let invalid as EventPublisher.InvalidEvent {
            throw UsageError("\(command): \(invalid)")
        }
    }

    /// `produce --topic T [FILE|-]`: publishes JSON lines, each validated against the topic's schema first;
    /// invalid lines are reported with their number and reason and not published. Exit 1 if any was invalid. Lines are
    /// published as they are read, `produceChunk` at a time.
    static func produce(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--topic", "--brokers", "--kafka", "--topic-prefix"])
        let prefix = options.string("--topic-prefix") ?? ""
        guard let topic = options.string("--topic") else { throw UsageError("produce: --topic is required") }
        guard let type = EventType.allCases.first(where: { prefix + $0.topic == topic }) else {
            throw UsageError("produce: \(topic) is not one of the pipeline's topics (\(EventType.allCases.map { prefix + $0.topic }.joined(separator: ", ")))")
        }
        let schemas = try JSONSchemaRegistry.eventSchemas()
        // Lines as bytes: a line that is not UTF-8 is an invalid line like any other, and a CRLF file splits as it
        // should (as Characters, "\r\n" is one, not a newline).
        let lines = try InputLines(path: options.positional.first ?? "-")
        let producer = try KafkaProducer(configuration: .init(kafka: try options.kafkaConfiguration()))
        // Published a chunk at a time as the lines are read, so that a backfill file of any size fits in memory.
        var chunk: [KafkaProducerMessage] = []
        var published = 0, invalid = 0, failed = 0
        func publishChunk() async {
            for result in await producer.send(contentsOf: chunk) {
                if case .failure(let error) = result {
                    failed += 1
                    FileHandle.standardError.write(Data("not acknowledged: \(error)\n".utf8))
                } else {
                    published += 1
                }
            }
            chunk.removeAll(keepingCapacity: true)
        }
        var number = 0
        do {
            while let line = try lines.next() {
                number += 1
                let text = InputLines.trimmingBlanks(line)
                if text.isEmpty { continue }
                guard let json = JSONValue.parse(text) else {
                    FileHandle.standardError.write(Data("line \(number): not JSON\n".utf8))
                    invalid += 1
                    continue
                }
                let violations = schemas.validate(json, against: type.schemaID)
                guard violations.isEmpty else {
                    FileHandle.standardError.write(Data("line \(number): \(violations.map(\.description).joined(separator: "; "))\n".utf8))
                    invalid += 1
                    continue
                }
                let key = json.objectValue?["userId"]?.stringValue
                chunk.append(KafkaProducerMessage(topic: topic, key: key.map { Data($0.utf8) }, value: Data(text), headers: [
                    KafkaHeader(key: "ce_specversion", string: "1.0"), KafkaHeader(key: "ce_id", string: UUID().uuidString.lowercased()),
                    KafkaHeader(key: "ce_type", string: type.ceType), KafkaHeader(key: "ce_source", string: "/iapctl/produce"),
                    KafkaHeader(key: "ce_time", string: RFC3339.format(Date())), KafkaHeader(key: "ce_dataschema", string: type.schemaID),
                    KafkaHeader(key: "content-type", string: "application/json"),
                ]))
                if chunk.count == Self.produceChunk { await publishChunk() }
            }
            await publishChunk()
        } catch {
            // What was read before the failure is published already; the input ended early.
            await producer.shutdown()
            throw error
        }
        await producer.shutdown()
        print("published \(published), invalid \(invalid), failed \(failed)")
        return invalid == 0 && failed == 0 ? 0 : 1
    }

    /// Lines published at a time by `produce`.
    static let produceChunk = 5_000

    /// `tail --topic T [--from-beginning] [--max N] [--timeout SECONDS]`: prints each event as one JSON line with its
    /// headers; stops after N events or after the timeout (exit 1 if fewer than N arrived by then).
    static func tail(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--topic", "--brokers", "--kafka", "--max", "--timeout"], flags: ["--from-beginning"])
        guard let topic = options.string("--topic") else { throw UsageError("tail: --topic is required") }
        let limit = try options.int("--max", in: 1...Int.max)
        var kafka = try options.kafkaConfiguration()
        kafka["auto.offset.reset"] = options.flags.contains("--from-beginning") ? "earliest" : "latest"
        let consumer = try KafkaConsumer(configuration: .init(kafka: kafka, groupID: "iapctl-tail-\(UUID().uuidString.prefix(8))", topics: [topic]))
        let printed = Counter()
        let timedOut = Mutex(false)
        if let seconds = try options.int("--timeout", in: 1...86_400) {
            Task {
                try await Task.sleep(for: .seconds(seconds))
                timedOut.withLock { $0 = true }
                consumer.triggerGracefulShutdown()
            }
        }
        try await consumer.run { message in
            var line: [String: JSONValue] = [
                "topic": .string(message.topic), "partition": .integer(Int64(message.partition)), "offset": .integer(message.offset),
                "key": message.key.map { .string(String(decoding: $0, as: UTF8.self)) } ?? .null,
                "headers": .object(Dictionary(message.headers.map { ($0.key, $0.stringValue.map(JSONValue.string) ?? .null) }, uniquingKeysWith: { a, _ in a })),
            ]
            line["value"] = message.value.flatMap { JSONValue.parse(Array($0)) } ?? message.value.map { .string("base64:" + $0.base64EncodedString()) } ?? .null
            // Written straight to the file descriptor: a pipe would otherwise hold lines back in a buffer.
            FileHandle.standardOutput.write(Data((JSONValue.object(line).serializedText + "\n").utf8))
            if let limit, printed.increment() >= limit { consumer.triggerGracefulShutdown() }
        }
        if timedOut.withLock({ $0 }), let limit, printed.current < limit {
            FileHandle.standardError.write(Data("tail: timed out before \(limit) events\n".utf8))
            return 1
        }
        return 0
    }
}

/// A thread-safe count for handlers.
final class Counter: Sendable {
    private let value = Mutex(0)
    func increment() -> Int { value.withLock { $0 += 1; return $0 } }
    var current: Int { value.withLock { $0 } }
}

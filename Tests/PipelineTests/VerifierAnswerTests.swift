import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import StoreFixtures
import StoreVerification
import Testing
import TestSupport
import WorkerRuntime

/// What the verifier answers a submission with, the stage driven directly on a SQLite store: every submission gets
/// `purchase.verified` or `purchase.rejected` with a reason, never silence.
@Suite struct VerifierAnswerTests {
    static let pki = try! TestPKI.make()
    let codec = EventCodec(schemas: PipelineTests.schemas, source: "/test")
    let store: SQLPurchaseStore
    let stage: VerifierStage

    init(restorePolicy: RestorePolicy = .transfer) async throws {
        store = try SQLPurchaseStore(url: try await StoreEngine.sqlite.freshURL())
        _ = try await store.migrate()
        let pki = Self.pki
        stage = VerifierStage(
            context: StageContext(codec: codec, logger: Logger(stage: "verifier", minimum: .error)), store: store,
            appStore: try SignedDataVerifier(configuration: .init(trustedRoots: [pki.root], bundleId: PipelineTests.bundle, environment: .sandbox)),
            receipts: try ReceiptVerifier(configuration: .init(trustedRoots: [pki.root], bundleId: PipelineTests.bundle, environment: .sandbox)),
            restorePolicy: restorePolicy)
    }

    /// Each published event as its type, and for a rejection its reason (`rejected:<reason>`).
    func answers(_ submission: PurchaseSubmitted) async throws -> [String] {
        let produced = try codec.message(submission, time: Date())
        let message = KafkaMessage(topic: produced.topic, partition: 0, offset: 0, key: produced.key, value: produced.value, headers: produced.headers)
        guard case .publish(let events) = try await stage.handle(message) else { return ["not published"] }
        return events.map { event in
            guard event.topic == codec.topic(.purchaseRejected) else { return event.topic }
            let reason = event.value.flatMap { JSONValue.parse($0)?.objectValue?["reason"]?.stringValue } ?? "?"
            return "rejected:\(reason)"
        }
    }

    func receiptSubmission(_ purchases: [InAppPurchaseReceipt], user: String = "u-1") throws -> PurchaseSubmitted {
        let receipt = AppReceipt(receiptType: ReceiptSigner.sandbox, bundleId: PipelineTests.bundle, appVersion: "1", creationDate: Date(),
                                 inAppPurchases: purchases)
        return PurchaseSubmitted(store: .appstore, kind: .appReceipt, receipt: try ReceiptSigner(pki: Self.pki).sign(receipt), userId: user,
                                 submittedAt: Date(), source: .client)
    }

    @Test func aGenuineReceiptWithoutPurchasesIsAnsweredWithAReason() async throws {
        #expect(try await answers(try receiptSubmission([])) == ["rejected:noPurchases"])
    }

    @Test func aReceiptWithAnEntryWithoutIdsIsRejectedNotPartlyIgnored() async throws {
        let complete = InAppPurchaseReceipt(quantity: 1, productId: "coins.100", transactionId: "1000000001", purchaseDate: Date())
        let withoutId = InAppPurchaseReceipt(quantity: 1, productId: "coins.100", purchaseDate: Date())
        #expect(try await answers(try receiptSubmission([complete, withoutId])) == ["rejected:malformedReceipt"])
        #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "1000000001")) == nil, "nothing of it recorded")
        // The control: the complete entry alone is verified.
        #expect(try await answers(try receiptSubmission([complete])) == [codec.topic(.purchaseVerified)])
    }
}

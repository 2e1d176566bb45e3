import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Testing
import WorkerRuntime

/// Values the App Store signed are still outside input: a notification whose ids no event schema carries is refused by
/// the verifier with the field and why, never published as an event its schema refuses (for the granter or the finisher
/// to dead-letter); and every event it does publish about a store's announcement matches its schema.
extension VerifierAnswerTests {
    func signedNotification(_ type: AppStoreNotificationType, uuid: String = UUID().uuidString.lowercased(), transactionId: String,
                            original: String? = nil, productId: String = "coins.100") throws -> String {
        let signer = JWSSigner(pki: Self.pki)
        let transaction = try signer.sign(AppStorePayloads.transaction(transactionId: transactionId, originalTransactionId: original, productId: productId,
                                                                       bundleId: StageFixtures.bundle, type: productId == "adfree" ? .nonConsumable : .consumable))
        return try signer.sign(AppStorePayloads.notification(type: type, uuid: uuid, bundleId: StageFixtures.bundle, appAppleId: nil,
                                                             signedTransactionInfo: transaction))
    }

    /// Each published message checked against its schema (`invalid: …` for one that fails it), or the dead letter.
    func outcome(_ result: StageResult) -> [String] {
        switch result {
        case .publish(let events):
            return events.map { event in
                let message = KafkaMessage(topic: event.topic, partition: 0, offset: 0, key: event.key, value: event.value, headers: event.headers)
                guard let type = codec.eventType(ofTopic: event.topic) else { return "unknown topic \(event.topic)" }
                if case .failure(let invalid) = codec.validated(message, as: type) { return "invalid: \(invalid)" }
                return event.topic
            }
        case .deadLetter(let reason, let detail): return ["\(reason): \(detail)"]
        case .recheck: return ["recheck"]
        }
    }

    @Test func aNotificationWhoseIdNoEventCarriesIsRefusedNamingTheField() async throws {
        let tooLong = String(repeating: "a", count: 65)
        for (uuid, fault) in [(tooLong, "notificationUUID is 65 characters long, more than 64"), ("\u{0}", "notificationUUID holds the control character U+0000"),
                              ("", "notificationUUID is empty")] {
            let answered = outcome(try await notified(try signedNotification(.refund, uuid: uuid, transactionId: "700")))
            #expect(answered.count == 1 && answered[0].hasPrefix("notificationRejected: malformedPayload") && answered[0].contains(fault), "\(answered)")
        }
        let emptyId = outcome(try await notified(try signedNotification(.refund, transactionId: "")))
        #expect(emptyId.count == 1 && emptyId[0].contains("signed transaction's transactionId is empty"), "\(emptyId)")
        let emptyOriginal = outcome(try await notified(try signedNotification(.refundReversed, transactionId: "700", original: "")))
        #expect(emptyOriginal.count == 1 && emptyOriginal[0].contains("originalTransactionId is empty"), "\(emptyOriginal)")
        let bell = outcome(try await notified(try signedNotification(.consumptionRequest, transactionId: "700", productId: "coins\u{7}")))
        #expect(bell.count == 1 && bell[0].contains("productId holds the control character U+0007 at character 6"), "\(bell)")
        // The control: the longest id the schema carries, in characters (a Character of many code points counts as many).
        let longest = String(repeating: "e\u{301}", count: 32)
        #expect(outcome(try await notified(try signedNotification(.refund, uuid: longest, transactionId: "700"))) == [codec.topic(.purchaseRevoked)])
        #expect(outcome(try await notified(try signedNotification(.consumptionRequest, uuid: longest, transactionId: "700"))) == [codec.topic(.consumptionRequested)])
        #expect(outcome(try await notified(try signedNotification(.refund, uuid: longest + "e", transactionId: "700"))).first?.hasPrefix("notificationRejected") == true)
    }

    /// A charge the store announces for a known subscriber, refused (its refund came first): `purchase.rejected` names no
    /// `submissionId` (no producer's submission it answers; the schema carries UUIDs), and its `causeId` the notification.
    @Test func aRefusedAnnouncedChargeNamesNoSubmissionId() async throws {
        #expect(try await answers(try transactionSubmission("800", original: "800", user: "alice")) == [codec.topic(.purchaseVerified)])
        for id in ["801", "802"] { _ = try await store.revoke(PurchaseKey(store: .appstore, transactionId: TransactionID(id)), at: Date()) }
        let uuid = UUID().uuidString.lowercased()
        let answered = try await notified(try signedNotification(.oneTimeCharge, uuid: uuid, transactionId: "801", original: "800", productId: "adfree"))
        #expect(outcome(answered) == [codec.topic(.purchaseRejected)])
        let rejected = StageFixtures.published(answered, as: PurchaseRejectedEvent.self)
        #expect(rejected.count == 1 && rejected.first?.userId == "alice" && rejected.first?.reason == "revoked")
        #expect(rejected.first?.submissionId == nil)
        #expect(rejected.first?.causeID.contains(uuid) == true, "\(rejected.first?.causeID ?? "")")
        // The control: a producer's submission is answered with its own id.
        let submissionId = UUID().uuidString.lowercased()
        var submission = try transactionSubmission("802", original: "800", user: "alice")
        submission.submissionId = submissionId
        let produced = try codec.message(submission, time: Date())
        let resubmitted = try await stage.handle(KafkaMessage(topic: produced.topic, partition: 0, offset: 0, key: produced.key, value: produced.value,
                                                              headers: produced.headers))
        #expect(outcome(resubmitted) == [codec.topic(.purchaseRejected)])
        #expect(StageFixtures.published(resubmitted, as: PurchaseRejectedEvent.self).first?.submissionId == submissionId)
    }
}

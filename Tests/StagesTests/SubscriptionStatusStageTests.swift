import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import InMemoryPurchaseStore
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Testing
import WorkerRuntime

/// The verifier records the status of a subscription from the renewal info of the notifications that carry one, and
/// announces `subscription.status` when it changed: never for a repeat, never for information older than what it holds.
@Suite struct SubscriptionStatusStageTests {
    static let pki = try! TestPKI.make()
    let codec = StageFixtures.codec
    let store = InMemoryPurchaseStore()
    let signer = JWSSigner(pki: Self.pki)
    let stage: VerifierStage
    /// Signed a little before now (within the test certificates' validity), in whole milliseconds as the store signs.
    let signedAt = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 600).rounded())

    init() throws {
        stage = VerifierStage(
            context: StageContext(codec: codec, logger: Logger(stage: "verifier", minimum: .error)), store: store,
            stores: StoreVerifiers(appStore: AppStoreVerifiers(
                signedData: try SignedDataVerifier(configuration: .init(trustedRoots: [Self.pki.root], bundleId: StageFixtures.bundleID, environment: .sandbox)))))
    }

    /// A notification about the subscription "7000" (its period "7001"), signed at `signedAt + offset`.
    func notification(_ type: AppStoreNotificationType, subtype: String? = nil, at offset: TimeInterval, graceEnd: Date? = nil,
                      renewal: [String: JSONValue] = [:]) throws -> String {
        let signed = signedAt.addingTimeInterval(offset)
        let period = try signer.sign(AppStorePayloads.transaction(transactionId: "7001", originalTransactionId: "7000", productId: "pass.monthly",
                                                                 bundleId: StageFixtures.bundle, type: .autoRenewable, signedDate: signed,
                                                                 extra: ["expiresDate": .integer(AppStorePayloads.milliseconds(signedAt.addingTimeInterval(86_400)))]))
        let info = try signer.sign(AppStorePayloads.renewalInfo(originalTransactionId: "7000", productId: "pass.monthly", gracePeriodExpiresDate: graceEnd,
                                                                signedDate: signed, extra: renewal))
        return try signer.sign(AppStorePayloads.notification(type: type, subtype: subtype, bundleId: StageFixtures.bundle, appAppleId: nil,
                                                             signedTransactionInfo: period, signedRenewalInfo: info, signedDate: signed))
    }

    /// What the stage answers the signed notification with: its `subscription.status` events (each checked against the
    /// schema) and the topics of everything it published.
    func handle(_ payload: String) async throws -> (statuses: [SubscriptionStatusChanged], topics: [String]) {
        let result = try await stage.handle(try StageFixtures.message(StoreNotificationReceived(signedPayload: payload, receivedAt: Date())))
        guard case .publish(let messages) = result else {
            Issue.record("not published: \(result)")
            return ([], [])
        }
        for message in messages where message.topic == codec.topic(.subscriptionStatus) {
            let body = try #require(message.value.flatMap { JSONValue.parse($0) })
            #expect(StageFixtures.schemas.validate(body, against: EventType.subscriptionStatus.schemaID).isEmpty, "\(body)")
            #expect(message.key == Data("alice".utf8), "keyed by the owner")
        }
        return (StageFixtures.published(result, as: SubscriptionStatusChanged.self), messages.map(\.topic))
    }

    /// The subscription bought by alice (SUBSCRIBED): recorded for her, and its first status announced.
    func subscribe() async throws {
        let submission = PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: try signer.sign(AppStorePayloads.transaction(
            transactionId: "7000", productId: "pass.monthly", bundleId: StageFixtures.bundle, type: .autoRenewable, purchaseDate: signedAt.addingTimeInterval(-60))),
            userId: "alice", submittedAt: Date(), source: .client)
        _ = try await stage.handle(try StageFixtures.message(submission))
        let first = try await handle(try notification(.subscribed, subtype: "RESUBSCRIBE", at: 0))
        #expect(first.statuses.map(\.changed) == [[.productId, .willRenew]])
        #expect(first.statuses.first?.userId == "alice")
    }

    @Test func aRenewalTurnedOffIsAnnouncedOnceAndOlderNewsChangesNothing() async throws {
        try await subscribe()
        let disabled = try notification(.didChangeRenewalStatus, subtype: "AUTO_RENEW_DISABLED", at: 60, renewal: ["autoRenewStatus": .integer(0)])
        let announced = try await handle(disabled)
        #expect(announced.topics == [codec.topic(.subscriptionStatus)], "nothing else: the purchase is as it was")
        let event = try #require(announced.statuses.first)
        #expect(event.willRenew == false && event.changed == [.willRenew])
        #expect(event.notificationType == "DID_CHANGE_RENEWAL_STATUS" && event.notificationSubtype == "AUTO_RENEW_DISABLED")
        #expect(event.asOf == signedAt.addingTimeInterval(60) && event.originalTransactionId == "7000" && event.productId == "pass.monthly")

        // The same notification again (a redelivery after a crash between the commit and the broker, or Apple's retry):
        // the same announcement under the same id, so that one never acknowledged is not lost.
        let again = try await handle(disabled)
        #expect(again.statuses.map(\.changed) == [[.willRenew]] && again.statuses.first?.asOf == event.asOf)
        #expect(again.statuses.first?.eventID == event.eventID, "the same ce_id")
        let older = try notification(.didChangeRenewalStatus, subtype: "AUTO_RENEW_ENABLED", at: 30, renewal: ["autoRenewStatus": .integer(1)])
        #expect(try await handle(older).statuses.isEmpty, "signed before the one recorded")
        let kept = try await store.subscriptionStatus(store: .appstore, originalTransactionId: "7000")
        #expect(kept?.willRenew == false && kept?.asOf == signedAt.addingTimeInterval(60), "the newer stands")
        #expect(try await store.holdings(of: "alice").subscriptions == kept.map { [$0] }, "what the read side answers")
    }

    @Test func aFailedRenewalInItsGracePeriodSaysSinceWhenAndUntilWhen() async throws {
        try await subscribe()
        let graceEnd = signedAt.addingTimeInterval(16 * 86_400)
        let failed = try await handle(try notification(.didFailToRenew, subtype: "GRACE_PERIOD", at: 60, graceEnd: graceEnd))
        #expect(failed.topics.contains(codec.topic(.purchaseVerified)), "the period extended into the grace period, as before")
        let event = try #require(failed.statuses.first)
        #expect(event.changed == [.billingIssueSince, .gracePeriodEndsAt])
        #expect(event.billingIssueSince == signedAt.addingTimeInterval(60) && event.gracePeriodEndsAt == graceEnd)

        // Still failing, renewal turned off meanwhile: the issue keeps the time it was first reported.
        let later = try await handle(try notification(.didChangeRenewalStatus, subtype: "AUTO_RENEW_DISABLED", at: 120, graceEnd: graceEnd,
                                                      renewal: ["autoRenewStatus": .integer(0)]))
        #expect(later.statuses.map(\.changed) == [[.willRenew]])
        #expect(later.statuses.first?.billingIssueSince == signedAt.addingTimeInterval(60))
    }

    @Test func aPendingDowngradeAPriceIncreaseAnOfferAndAnExpiryAreEachAnnounced() async throws {
        try await subscribe()
        let downgrade = try await handle(try notification(.didChangeRenewalPref, subtype: "DOWNGRADE", at: 60, renewal: ["autoRenewProductId": .string("pass.basic")]))
        #expect(downgrade.statuses.map(\.changed) == [[.pendingProductId]])
        #expect(downgrade.statuses.first?.pendingProductId == "pass.basic")
        let increase = try await handle(try notification(.priceIncrease, subtype: "PENDING", at: 120))
        #expect(increase.statuses.first?.priceIncreaseStatus == 0 && increase.statuses.first?.changed == [.pendingProductId, .priceIncreaseStatus],
                "PENDING: not responded; the downgrade was taken back (its renewal info names the product again)")
        let offer = try await handle(try notification(.offerRedeemed, at: 180, renewal: ["offerType": .integer(2), "offerIdentifier": .string("loyal-3m"),
                                                                                             "priceIncreaseStatus": .integer(0)]))
        #expect(offer.statuses.first?.changed == [.offerType, .offerIdentifier])
        let expired = try await handle(try notification(.expired, subtype: "BILLING_RETRY", at: 240, renewal: ["autoRenewStatus": .integer(0)]))
        let reason = try #require(expired.statuses.first)
        #expect(reason.expirationReason == SubscriptionStatus.ExpirationReason.billingError.rawValue && reason.changed.contains(.expirationReason))
        #expect(expired.topics.contains(codec.topic(.purchaseRevoked)), "the entitlement ends, as before")
    }
}

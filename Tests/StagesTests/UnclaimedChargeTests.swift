import Foundation
import InMemoryPurchaseStore
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

/// A charge the store announces (`ONE_TIME_CHARGE`) before any submission names its user: the verifier on the in-memory
/// repository keeps it unclaimed, gives it to the user its account token belongs to, or lets the first submission claim it.
@Suite struct UnclaimedChargeTests {
    let verifier: VerifierAnswerTests
    var store: InMemoryPurchaseStore { verifier.store }
    let signer = JWSSigner(pki: VerifierAnswerTests.pki)

    init() async throws { verifier = try await VerifierAnswerTests() }

    func transaction(_ id: String, token: String? = nil) throws -> String {
        try signer.sign(AppStorePayloads.transaction(transactionId: id, productId: "coins.100", bundleId: StageFixtures.bundle, appAccountToken: token))
    }

    func charge(_ id: String, token: String? = nil) throws -> StoreNotificationReceived {
        let payload = AppStorePayloads.notification(type: .oneTimeCharge, bundleId: StageFixtures.bundle, appAppleId: nil,
                                                    signedTransactionInfo: try transaction(id, token: token))
        return StoreNotificationReceived(signedPayload: try signer.sign(payload), receivedAt: Date())
    }

    func submission(_ id: String, user: UserID, token: String? = nil) throws -> PurchaseSubmitted {
        PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: try transaction(id, token: token), userId: user,
                          submittedAt: Date(), source: .client, appAccountToken: token.map { AccountToken($0) })
    }

    func key(_ id: String) -> PurchaseKey { PurchaseKey(store: .appstore, transactionId: TransactionID(id)) }

    @Test func aChargeNobodySubmittedIsKeptUntilTheFirstSubmissionClaimsIt() async throws {
        #expect(try await verifier.answers(try charge("700")) == [], "nothing to grant to anybody yet")
        let kept = try #require(try await store.purchase(key("700")))
        #expect(kept.state == .unclaimed && kept.userId == .nobody)
        #expect(try await store.owner(store: .appstore, originalTransactionId: "700") == nil, "an unclaimed charge has no owner")
        #expect(try await verifier.answers(try charge("700")) == [], "announced again: nothing changes")

        #expect(try await verifier.answers(try submission("700", user: "u-late")) == [verifier.codec.topic(.purchaseVerified)])
        let claimed = try #require(try await store.purchase(key("700")))
        #expect(claimed.state == .verified && claimed.userId == "u-late")
        #expect(try await verifier.answers(try submission("700", user: "u-other")) == ["rejected:transactionOfAnotherUser"], "claimed once")
    }

    /// The token a user's earlier purchase was bound to names the user of a later charge: it is theirs at once.
    @Test func aChargeWhoseAccountTokenIsKnownIsTheTokensUsersAtOnce() async throws {
        let token = "3F0A2F2E-8A7C-4C1E-9D57-0000000000AA"
        #expect(try await verifier.answers(try submission("701", user: "u-token", token: token)) == [verifier.codec.topic(.purchaseVerified)])
        #expect(try await verifier.answers(try charge("702", token: token.lowercased())) == [verifier.codec.topic(.purchaseVerified)],
                "the token's letters in another case are the same account")
        #expect(try await store.purchase(key("702"))?.userId == "u-token")
        #expect(try await verifier.answers(try charge("703", token: "3f0a2f2e-8a7c-4c1e-9d57-0000000000bb")) == [], "an unknown token: unclaimed")
        #expect(try await store.purchase(key("703"))?.state == .unclaimed)
    }

    /// A token the app's backend registered for its user (`user.token`) before any purchase names the user of a charge
    /// that carries it: theirs at once. Another user's registration of that token is dead-lettered, and changes nothing.
    @Test func aRegisteredTokenNamesTheUserOfACharge() async throws {
        let token = "3f0a2f2e-8a7c-4c1e-9d57-0000000000cc"
        let registration = UserAccountTokenRegistered(userId: "u-registered", appAccountToken: AccountToken(token), registeredAt: Date())
        #expect(try await verifier.answers(registration) == [], "recorded, nothing to answer")
        #expect(try await verifier.answers(try charge("708", token: token.uppercased())) == [verifier.codec.topic(.purchaseVerified)])
        #expect(try await store.purchase(key("708"))?.userId == "u-registered")

        let stolen = UserAccountTokenRegistered(userId: "u-other", appAccountToken: AccountToken(token), registeredAt: Date())
        let produced = try verifier.codec.message(stolen, time: Date())
        let result = try await verifier.stage.handle(KafkaMessage(topic: produced.topic, partition: 0, offset: 1, key: produced.key, value: produced.value,
                                                                  headers: produced.headers))
        guard case .deadLetter(let reason, _) = result else {
            Issue.record("another user's registration of a token was not dead-lettered: \(result)")
            return
        }
        #expect(reason == "accountTokenOfAnotherUser")
        #expect(try await store.owner(ofAccountToken: AccountToken(token)) == "u-registered", "the first registration stands")
    }

    /// A refund of a charge nobody claimed names no user (the schema wants a real one or none), is carried out by the
    /// granter, and the app's late submission of it is refused: never granted.
    @Test func aRefundOfAnUnclaimedChargeEndsItAndItsLateSubmissionIsRefused() async throws {
        #expect(try await verifier.answers(try charge("706")) == [])
        let refunded = try signer.sign(AppStorePayloads.transaction(transactionId: "706", productId: "coins.100", bundleId: StageFixtures.bundle,
                                                                    revocationDate: Date()))
        let refund = StoreNotificationReceived(signedPayload: try signer.sign(AppStorePayloads.notification(
            type: .refund, bundleId: StageFixtures.bundle, appAppleId: nil, signedTransactionInfo: refunded)), receivedAt: Date())
        let revoked = try #require(StageFixtures.published(try await verifier.stage.handle(try StageFixtures.message(refund)),
                                                           as: PurchaseRevokedEvent.self).first)
        #expect(revoked.userId == nil, "nobody's: no user named")
        _ = try await GranterStageTests.granter(store, at: Date()).handle(try StageFixtures.message(revoked))
        #expect(try await store.purchase(key("706"))?.state == .revoked)
        #expect(try await verifier.answers(try submission("706", user: "u-late")) == ["rejected:transactionOfAnotherUser"], "refunded: never granted")
        #expect(try await store.balances(of: "u-late").isEmpty)
    }

    /// A charge with the token of an earlier charge nobody claimed (since refunded or flagged) is nobody's too: kept
    /// unclaimed, not recorded for the empty owner.
    @Test func aTokenOnlyUnclaimedChargesCarriedNamesNobody() async throws {
        let token = "3f0a2f2e-8a7c-4c1e-9d57-0000000000cc"
        #expect(try await verifier.answers(try charge("707", token: token)) == [])
        _ = try await store.revoke(key("707"), at: Date())
        #expect(try await verifier.answers(try charge("708", token: token)) == [])
        #expect(try await store.purchase(key("708"))?.state == .unclaimed)
    }

    @Test func aChargeRefundedBeforeItWasAnnouncedIsRecordedRevoked() async throws {
        _ = try await store.revoke(key("704"), at: Date())
        #expect(try await verifier.answers(try charge("704")) == [])
        #expect(try await store.purchase(key("704"))?.state == .revoked)
    }
}

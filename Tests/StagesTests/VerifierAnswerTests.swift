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

/// What the verifier answers a submission with, the stage driven directly on the in-memory repository: every submission
/// gets `purchase.verified` or `purchase.rejected` with a reason, never silence.
@Suite struct VerifierAnswerTests {
    static let pki = try! TestPKI.make()
    let codec = StageFixtures.codec
    let store = InMemoryPurchaseStore()
    let stage: VerifierStage

    init(restorePolicy: RestorePolicy = .transfer, requireAccountToken: Bool = false) async throws {
        let pki = Self.pki
        stage = VerifierStage(
            context: StageContext(codec: codec, logger: Logger(stage: "verifier", minimum: .error)), store: store,
            stores: StoreVerifiers(appStore: AppStoreVerifiers(
                signedData: try SignedDataVerifier(configuration: .init(trustedRoots: [pki.root], bundleId: StageFixtures.bundleID, environment: .sandbox)),
                receipts: try ReceiptVerifier(configuration: .init(trustedRoots: [pki.root], bundleId: StageFixtures.bundleID, environment: .sandbox)))),
            restorePolicy: restorePolicy, requireAccountToken: requireAccountToken)
    }

    /// Each published event as its type, and for a rejection its reason (`rejected:<reason>`).
    func answers(_ submission: some PipelineEvent) async throws -> [String] {
        let produced = try codec.message(submission, time: Date())
        let message = KafkaMessage(topic: produced.topic, partition: 0, offset: 0, key: produced.key, value: produced.value, headers: produced.headers)
        guard case .publish(let events) = try await stage.handle(message) else { return ["not published"] }
        return events.map { event in
            guard event.topic == codec.topic(.purchaseRejected) else { return event.topic }
            let reason = event.value.flatMap { JSONValue.parse($0)?.objectValue?["reason"]?.stringValue } ?? "?"
            return "rejected:\(reason)"
        }
    }

    func receiptSubmission(_ purchases: [InAppPurchaseReceipt], user: UserID = "u-1") throws -> PurchaseSubmitted {
        let receipt = AppReceipt(receiptType: ReceiptSigner.sandbox, bundleId: StageFixtures.bundleID, appVersion: "1", creationDate: Date(),
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

    func transactionSubmission(_ id: String, original: String, user: UserID) throws -> PurchaseSubmitted {
        let payload = AppStorePayloads.transaction(transactionId: id, originalTransactionId: original, productId: "adfree", bundleId: StageFixtures.bundle,
                                                   type: .nonConsumable)
        return PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: try JWSSigner(pki: Self.pki).sign(payload), userId: user,
                                 submittedAt: Date(), source: .client)
    }

    /// Under the `keep` policy, "Kevin" owns ad-free; "\u{212A}evin" (a KELVIN SIGN, which Swift's `String` takes for a
    /// K) submitting Kevin's transaction is another user, refused; under `transfer` the entitlement moves to that user.
    @Test func aUserWhoseIdOnlyEqualsTheOwnersAsAStringIsAnotherUser() async throws {
        let (owner, twin): (UserID, UserID) = ("Kevin", "\u{212A}evin")
        #expect(owner.rawValue == twin.rawValue, "Swift's String takes them as equal")
        let keep = try await VerifierAnswerTests(restorePolicy: .keep)
        #expect(try await keep.answers(try keep.transactionSubmission("100", original: "100", user: owner)) == [keep.codec.topic(.purchaseVerified)])
        _ = try await keep.store.grant(PurchaseKey(store: .appstore, transactionId: "100"), items: [.entitlement("adfree")], at: Date())
        #expect(try await keep.answers(try keep.transactionSubmission("100", original: "100", user: twin)) == ["rejected:ownedByAnotherUser"])
        #expect(try await keep.answers(try keep.transactionSubmission("200", original: "100", user: twin)) == ["rejected:ownedByAnotherUser"])
        #expect(try await keep.store.entitlements(of: twin).isEmpty)
        #expect(try await keep.store.purchase(PurchaseKey(store: .appstore, transactionId: "100"))?.userId == owner)

        let transfer = try await VerifierAnswerTests(restorePolicy: .transfer)
        #expect(try await transfer.answers(try transfer.transactionSubmission("100", original: "100", user: owner)) == [transfer.codec.topic(.purchaseVerified)])
        _ = try await transfer.store.grant(PurchaseKey(store: .appstore, transactionId: "100"), items: [.entitlement("adfree")], at: Date())
        #expect(try await transfer.answers(try transfer.transactionSubmission("100", original: "100", user: twin)) == [transfer.codec.topic(.itemGranted)])
        #expect(try await transfer.store.entitlements(of: owner).isEmpty, "moved: one owner at a time")
        #expect(try await transfer.store.entitlements(of: twin).keys.sorted() == ["adfree"])
    }

    /// Alice's ad-free purchase, verified and granted (as the granter would).
    func alicesPurchase() async throws {
        #expect(try await answers(try transactionSubmission("100", original: "100", user: "alice")) == [codec.topic(.purchaseVerified)])
        _ = try await store.grant(PurchaseKey(store: .appstore, transactionId: "100"), items: [.entitlement("adfree")], at: Date())
    }

    /// A restore is a new transaction naming the original: under `keep` it is refused like a replay of the original.
    @Test func aRestoreUnderANewTransactionIdIsJudgedByTheRestorePolicyKeep() async throws {
        let verifier = try await VerifierAnswerTests(restorePolicy: .keep)
        try await verifier.alicesPurchase()
        #expect(try await verifier.answers(try verifier.transactionSubmission("100", original: "100", user: "bob")) == ["rejected:ownedByAnotherUser"])
        #expect(try await verifier.answers(try verifier.transactionSubmission("200", original: "100", user: "bob")) == ["rejected:ownedByAnotherUser"])
        #expect(try await verifier.store.purchase(PurchaseKey(store: .appstore, transactionId: "200")) == nil, "nothing recorded for bob")
        #expect(try await verifier.store.entitlements(of: "bob").isEmpty)
        #expect(try await verifier.store.entitlements(of: "alice").keys.sorted() == ["adfree"])
    }

    /// Under `transfer` the entitlement moves, one owner at a time, and the restore is recorded for the new owner.
    @Test func aRestoreUnderANewTransactionIdMovesTheEntitlementUnderTransfer() async throws {
        try await alicesPurchase()
        let restored = try await answers(try transactionSubmission("200", original: "100", user: "bob"))
        #expect(restored == [codec.topic(.itemGranted), codec.topic(.purchaseVerified)], "the move, then the restore's own verdict")
        #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "100"))?.userId == "bob")
        #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "200"))?.userId == "bob")
        #expect(try await store.entitlements(of: "alice").isEmpty, "one owner at a time")
        #expect(try await store.entitlements(of: "bob").keys.sorted() == ["adfree"])
        // Alice restoring it back on her own device moves it back.
        let back = try await answers(try transactionSubmission("300", original: "100", user: "alice"))
        #expect(back == [codec.topic(.itemGranted), codec.topic(.purchaseVerified)])
        #expect(try await store.entitlements(of: "bob").isEmpty)
    }

    /// Alice's ad-free purchase is bound to her account (`appAccountToken`). Mallory, whose submissions name her own token,
    /// holds Alice's receipt: submitting it — the transaction itself, or a restore naming it — moves nothing (a receipt
    /// carries no token: the one recorded with the transaction judges it), and nothing is recorded for her.
    @Test func aReceiptDoesNotMoveATransactionBoundToAnotherAccount() async throws {
        let (alicesToken, mallorysToken): (AccountToken, AccountToken) = ("3f0a2f2e-8a7c-4c1e-9d57-00000000a11c", "3f0a2f2e-8a7c-4c1e-9d57-0000000ba11e")
        let payload = AppStorePayloads.transaction(transactionId: "100", originalTransactionId: "100", productId: "adfree", bundleId: StageFixtures.bundle,
                                                   type: .nonConsumable, appAccountToken: alicesToken.rawValue)
        let alices = PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: try JWSSigner(pki: Self.pki).sign(payload),
                                       userId: "alice", submittedAt: Date(), source: .client, appAccountToken: alicesToken)
        #expect(try await answers(alices) == [codec.topic(.purchaseVerified)])
        _ = try await store.grant(PurchaseKey(store: .appstore, transactionId: "100"), items: [.entitlement("adfree")], at: Date())
        let now = Date()
        for (id, original): (TransactionID, TransactionID) in [("100", "100"), ("200", "100")] {
            var mallorys = try receiptSubmission([InAppPurchaseReceipt(quantity: 1, productId: "adfree", transactionId: id, originalTransactionId: original,
                                                                       purchaseDate: now.addingTimeInterval(-60), originalPurchaseDate: now.addingTimeInterval(-60))],
                                                 user: "mallory")
            mallorys.appAccountToken = mallorysToken
            #expect(try await answers(mallorys) == ["rejected:appAccountTokenMismatch"], "transaction \(id)")
        }
        #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "100"))?.userId == "alice")
        #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "200")) == nil, "nothing recorded for mallory")
        #expect(try await store.entitlements(of: "mallory").isEmpty)
        #expect(try await store.entitlements(of: "alice").keys.sorted() == ["adfree"])
    }

    /// With `requireAccountToken`, a transaction bound to Alice's account token is refused from a submission that names
    /// none: Mallory, holding Alice's signed subscription, cannot have it recorded or moved under her id by leaving the token
    /// out. Alice's own submission naming it is recorded, and the store's renewal (DID_RENEW, which names no token) is
    /// recorded for her. Without the setting the same submission binds nothing and moves the subscription (`transfer`).
    @Test func aRequiredAccountTokenRefusesSubmissionsNamingNoneButNotTheStoresRenewal() async throws {
        let alicesToken: AccountToken = "3f0a2f2e-8a7c-4c1e-9d57-00000000a11c"
        func period(_ id: String) throws -> String {
            try JWSSigner(pki: Self.pki).sign(AppStorePayloads.transaction(
                transactionId: id, originalTransactionId: "500", productId: "pass.gold", bundleId: StageFixtures.bundle, type: .autoRenewable,
                appAccountToken: alicesToken.rawValue, extra: ["expiresDate": .integer(AppStorePayloads.milliseconds(Date().addingTimeInterval(86_400)))]))
        }
        func submission(_ user: UserID, token: AccountToken?) throws -> PurchaseSubmitted {
            PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: try period("500"), userId: user, submittedAt: Date(),
                              source: .client, appAccountToken: token)
        }
        let verifier = try await VerifierAnswerTests(requireAccountToken: true)
        let key = PurchaseKey(store: .appstore, transactionId: "500")
        #expect(try await verifier.answers(try submission("mallory", token: nil)) == ["rejected:appAccountTokenMissing"])
        #expect(try await verifier.store.purchase(key) == nil, "nothing recorded for mallory")
        #expect(try await verifier.answers(try submission("alice", token: alicesToken)) == [codec.topic(.purchaseVerified)])
        #expect(try await verifier.answers(try submission("mallory", token: nil)) == ["rejected:appAccountTokenMissing"], "nor moved to her")
        #expect(try await verifier.store.purchase(key)?.userId == "alice")

        let renewal = AppStorePayloads.notification(type: .didRenew, bundleId: StageFixtures.bundle, appAppleId: nil, signedTransactionInfo: try period("501"))
        let notification = StoreNotificationReceived(signedPayload: try JWSSigner(pki: Self.pki).sign(renewal), receivedAt: Date())
        #expect(try await verifier.answers(notification) == [codec.topic(.purchaseVerified)])
        #expect(try await verifier.store.purchase(PurchaseKey(store: .appstore, transactionId: "501"))?.userId == "alice")

        // The control: without the setting, a submission naming no token binds nothing.
        #expect(try await answers(try submission("alice", token: alicesToken)) == [codec.topic(.purchaseVerified)])
        #expect(try await answers(try submission("mallory", token: nil)) != ["rejected:appAccountTokenMissing"])
        #expect(try await store.purchase(key)?.userId == "mallory", "moved under the transfer policy")
    }

    /// An AppCoins purchase whose API answer carries no purchase time is recorded at its submission's time, but never at one
    /// later than now: a client's `submittedAt` a month ahead would keep a consumable from its 24 h deadline.
    @Test func aSubmissionTimeInTheFutureIsNotAnAppCoinsPurchaseTime() async throws {
        let signer = try AppCoinsSigner()
        let api = try AppCoinsAPIStandIn(purchases: ["tok-1": .init(packageName: "com.example.coins", sku: "coins.100", orderId: "o-1", purchaseTime: nil)])
        defer { api.server.shutdown() }
        let stage = VerifierStage(
            context: StageContext(codec: codec, logger: Logger(stage: "verifier", minimum: .error)), store: store,
            stores: StoreVerifiers(appCoins: AppCoinsVerifier(configuration: .init(baseURL: api.baseURL, apps: ["com.example.coins": try signer.key.publicKey()]))))
        let signed = try signer.sign(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "tok-1", orderId: "o-1")
        let submission = PurchaseSubmitted(store: .appcoins, kind: .appcoinsPurchase,
                                           appcoins: .init(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "tok-1",
                                                           purchaseData: signed.purchaseData, signature: signed.signature),
                                           userId: "p", submittedAt: Date().addingTimeInterval(30 * 86_400), source: .client)
        let produced = try codec.message(submission, time: Date())
        let before = Date()
        guard case .publish(let events) = try await stage.handle(KafkaMessage(topic: produced.topic, partition: 0, offset: 0, key: produced.key,
                                                                              value: produced.value, headers: produced.headers)) else {
            Issue.record("not published")
            return
        }
        #expect(events.map(\.topic) == [codec.topic(.purchaseVerified)])
        let recorded = try #require(try await store.purchase(PurchaseKey(store: .appcoins, transactionId: "o-1")))
        // Kept in whole milliseconds: rounded, up to half a millisecond later than the moment it was recorded.
        #expect(recorded.purchaseTime <= Date().addingTimeInterval(0.001) && recorded.purchaseTime >= before.addingTimeInterval(-1), "now, not a month ahead")
    }

    /// A production verifier refuses sandbox purchases unless it accepts them (App Review buys in the sandbox): then a
    /// sandbox transaction or receipt is verified as the sandbox's and announced with environment Sandbox. Data signed for
    /// neither (Xcode) is still refused as not production's.
    @Test func aProductionVerifierAcceptsSandboxPurchasesOnlyWhenItIsAsked() async throws {
        let roots = [Self.pki.root]
        func stage(acceptingSandbox: Bool) -> VerifierStage {
            func verifiers(_ environment: AppStoreEnvironment) throws -> (SignedDataVerifier, ReceiptVerifier) {
                (try SignedDataVerifier(configuration: .init(trustedRoots: roots, bundleId: StageFixtures.bundleID, environment: environment, appAppleId: 42)),
                 try ReceiptVerifier(configuration: .init(trustedRoots: roots, bundleId: StageFixtures.bundleID, environment: environment)))
            }
            let production = try! verifiers(.production), sandbox = try! verifiers(.sandbox)
            return VerifierStage(context: StageContext(codec: codec, logger: Logger(stage: "verifier", minimum: .error)), store: store,
                                 stores: StoreVerifiers(appStore: AppStoreVerifiers(signedData: production.0, receipts: production.1,
                                                                                    sandbox: acceptingSandbox ? (sandbox.0, sandbox.1) : nil)))
        }
        func answer(_ stage: VerifierStage, _ submission: PurchaseSubmitted) async throws -> String {
            let produced = try codec.message(submission, time: Date())
            guard case .publish(let events) = try await stage.handle(KafkaMessage(topic: produced.topic, partition: 0, offset: 0, key: produced.key,
                                                                                  value: produced.value, headers: produced.headers)),
                  let value = events.first?.value, let event = JSONValue.parse(value)?.objectValue else { return "nothing" }
            return event["environment"]?.stringValue ?? event["reason"]?.stringValue ?? "?"
        }
        let signer = JWSSigner(pki: Self.pki)
        func transaction(_ id: String, _ environment: AppStoreEnvironment) throws -> PurchaseSubmitted {
            PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: try signer.sign(AppStorePayloads.transaction(
                transactionId: id, productId: "coins.100", bundleId: StageFixtures.bundle, environment: environment)), userId: "reviewer",
                submittedAt: Date(), source: .client)
        }
        let receipt = try receiptSubmission([InAppPurchaseReceipt(quantity: 1, productId: "coins.100", transactionId: "900", originalTransactionId: "900",
                                                                  purchaseDate: Date().addingTimeInterval(-60))], user: "reviewer")
        #expect(try await answer(stage(acceptingSandbox: false), try transaction("901", .sandbox)) == "wrongEnvironment")
        #expect(try await answer(stage(acceptingSandbox: false), receipt) == "wrongEnvironment")
        #expect(try await answer(stage(acceptingSandbox: true), try transaction("901", .sandbox)) == "Sandbox")
        #expect(try await answer(stage(acceptingSandbox: true), receipt) == "Sandbox")
        #expect(try await answer(stage(acceptingSandbox: true), try transaction("902", .xcode)) == "wrongEnvironment")
        #expect(try await store.purchase(PurchaseKey(store: .appstore, transactionId: "901"))?.environment == "Sandbox")
        // And the sandbox's notifications (a reviewer's refund): refused without, carried out with.
        let refund = try signer.sign(AppStorePayloads.notification(type: .refund, bundleId: StageFixtures.bundle, appAppleId: nil, environment: .sandbox,
                                                                   signedTransactionInfo: try signer.sign(AppStorePayloads.transaction(
                                                                       transactionId: "901", productId: "coins.100", bundleId: StageFixtures.bundle))))
        func notified(_ stage: VerifierStage) async throws -> String {
            let produced = try codec.message(StoreNotificationReceived(signedPayload: refund, receivedAt: Date()), time: Date())
            switch try await stage.handle(KafkaMessage(topic: produced.topic, partition: 0, offset: 0, key: produced.key, value: produced.value,
                                                       headers: produced.headers)) {
            case .publish(let events): return events.map(\.topic).joined(separator: ",")
            case .deadLetter(let reason, let detail): return "\(reason): \(detail.prefix(40))"
            case .recheck: return "recheck"
            }
        }
        #expect(try await notified(stage(acceptingSandbox: false)).hasPrefix("notificationRejected: wrongEnvironment"))
        #expect(try await notified(stage(acceptingSandbox: true)) == codec.topic(.purchaseRevoked))
    }

    /// A refund's `purchase.revoked` carries when Apple decided it, its notification's `signedDate`, for the granter to
    /// carry out a refund and its reversal in that order whichever comes first.
    @Test func aRefundNotificationSaysWhenTheStoreDecided() async throws {
        let signer = JWSSigner(pki: Self.pki)
        let signedDate = Date().addingTimeInterval(-60) // within the test certificates' validity
        let transaction = try signer.sign(AppStorePayloads.transaction(transactionId: "2000000000000901", productId: "coins.100", bundleId: StageFixtures.bundle,
                                                                      environment: .sandbox, signedDate: signedDate))
        let notification = try signer.sign(AppStorePayloads.notification(type: .refund, bundleId: StageFixtures.bundle, appAppleId: nil,
                                                                         signedTransactionInfo: transaction, signedDate: signedDate))
        guard case .publish(let events) = try await notified(notification),
              let value = events.first?.value, case .success(let revoked) = codec.decodeBody(value, as: PurchaseRevokedEvent.self) else {
            Issue.record("no purchase.revoked"); return
        }
        #expect(revoked.reason == .REFUND)
        #expect(abs((revoked.decidedAt ?? .distantPast).timeIntervalSince(signedDate)) < 0.001)
    }

    /// What the stage answers the signed notification `payload` with.
    func notified(_ payload: String) async throws -> StageResult {
        let produced = try codec.message(StoreNotificationReceived(signedPayload: payload, receivedAt: Date()), time: Date())
        return try await stage.handle(KafkaMessage(topic: produced.topic, partition: 0, offset: 0, key: produced.key, value: produced.value,
                                                   headers: produced.headers))
    }

    /// DID_FAIL_TO_RENEW in a billing grace period: the period it names is verified again until the grace period ends, which
    /// only that subscription's renewal info says; another subscription's renewal info extends nothing.
    @Test func aGracePeriodIsTakenOnlyFromTheSameSubscriptionsRenewalInfo() async throws {
        let signer = JWSSigner(pki: Self.pki)
        let expires = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 86_400).rounded())
        let graceEnd = expires.addingTimeInterval(16 * 86_400)
        let period = try signer.sign(AppStorePayloads.transaction(transactionId: "500", originalTransactionId: "500", productId: "pass.monthly",
                                                                 bundleId: StageFixtures.bundle, type: .autoRenewable,
                                                                 extra: ["expiresDate": .integer(AppStorePayloads.milliseconds(expires))]))
        #expect(try await answers(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: period, userId: "alice",
                                                    submittedAt: Date(), source: .client)) == [codec.topic(.purchaseVerified)])
        func graceNotice(renewalOf original: String) throws -> String {
            let renewal = try signer.sign(AppStorePayloads.renewalInfo(originalTransactionId: original, productId: "pass.monthly", gracePeriodExpiresDate: graceEnd))
            return try signer.sign(AppStorePayloads.notification(type: .didFailToRenew, subtype: "GRACE_PERIOD", bundleId: StageFixtures.bundle, appAppleId: nil,
                                                                 signedTransactionInfo: period, signedRenewalInfo: renewal))
        }
        guard case .publish(let foreign) = try await notified(try graceNotice(renewalOf: "999")) else { Issue.record("not answered"); return }
        #expect(foreign.isEmpty, "another subscription's renewal info")
        // Beside the subscription's status (`SubscriptionStatusStageTests`): one purchase.verified.
        let answered = try await notified(try graceNotice(renewalOf: "500"))
        guard case .publish(let events) = answered, events.filter({ $0.topic == codec.topic(.purchaseVerified) }).count == 1,
              let verified = StageFixtures.published(answered, as: PurchaseVerifiedEvent.self).first else { Issue.record("no purchase.verified"); return }
        #expect(verified.transactionId == "500" && verified.userId == "alice")
        #expect(verified.expiresDate == graceEnd)
    }
}


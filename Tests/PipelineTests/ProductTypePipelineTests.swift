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

/// What was bought decides what happens, and events in any order are judged right: through the broker, the
/// verifier, granter and finisher as the workers run them.
extension PipelineTests {
    func submission(_ pipeline: Pipeline, _ jws: String, user: UserID, source: SubmissionSource = .client, token: AccountToken? = nil) throws -> KafkaProducerMessage {
        try pipeline.codec.message(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws, userId: user,
                                                     submittedAt: Date(), source: source, appAccountToken: token), time: Date())
    }

    func notification(_ pipeline: Pipeline, _ signer: JWSSigner, _ type: AppStoreNotificationType, subtype: String? = nil, transaction: String,
                      renewalInfo: String? = nil) throws -> KafkaProducerMessage {
        let payload = AppStorePayloads.notification(type: type, subtype: subtype, bundleId: Self.bundle, appAppleId: nil, signedTransactionInfo: transaction,
                                                    signedRenewalInfo: renewalInfo)
        return try pipeline.codec.message(StoreNotificationReceived(signedPayload: try signer.sign(payload), receivedAt: Date()), time: Date())
    }

    func send(_ messages: [KafkaProducerMessage], servers: String) async throws {
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers])))
        for result in await producer.send(contentsOf: messages) { _ = try result.get() }
    }

    @Test func entitlementsFinishAtTheirGrantAndOnlyTheUnconsumedConsumableIsFlagged() async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await StoreEngine.sqlite.freshURL(), finishWithAppStoreAPI: false)
        let signer = JWSSigner(pki: pki)
        let bought = Date().addingTimeInterval(-3600)
        let purchases: [(id: String, product: String, type: AppStoreProductType, extra: [String: JSONValue])] = [
            ("8100001", "coins.100", .consumable, [:]),
            ("8100002", "adfree", .nonConsumable, [:]),
            ("8100003", "pass.monthly", .autoRenewable, ["expiresDate": .integer(AppStorePayloads.milliseconds(bought.addingTimeInterval(30 * 86_400)))]),
            ("8100004", "pass.season", .nonRenewing, [:]),
        ]
        try await send(try purchases.map { purchase in
            try submission(pipeline, try signer.sign(AppStorePayloads.transaction(transactionId: purchase.id, productId: purchase.product, bundleId: Self.bundle,
                                                                                  type: purchase.type, purchaseDate: bought, extra: purchase.extra)),
                           user: "user-types")
        }, servers: servers)
        try await waitUntil("the three entitlements finished at their grant, the coins granted") {
            try await pipeline.store.statistics().purchasesByState == [.finished: 3, .granted: 1]
        }
        try await pipeline.stop()
        #expect(try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: "8100001"))?.state == .granted, "waits for consumption")
        #expect(pipeline.appStore.finished.isEmpty, "no API configured")
        let entitlements = try await pipeline.store.entitlements(of: "user-types")
        #expect(entitlements.keys.sorted() == ["adfree", "pass"])
        #expect(entitlements["adfree"] == .some(nil), "ad-free for good")
        #expect(try await pipeline.store.balances(of: "user-types") == ["coins": 100])

        // Two days later the sweeper flags the unconsumed coins, and nothing else.
        let context = StageContext(codec: pipeline.codec, logger: Logger(stage: "sweeper", minimum: .error), now: { Date().addingTimeInterval(2 * 86_400) })
        let sweeper = SweeperService(configuration: .init(deadlines: [.appstore: 86_400]), store: pipeline.store,
                                     producer: try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": servers]))),
                                     context: context, clock: ContinuousClock())
        #expect(try await sweeper.sweepOnce() == 1)
        #expect(try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: "8100001"))?.state == .refundDue)
        for id: TransactionID in ["8100002", "8100003", "8100004"] {
            #expect(try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: id))?.state == .finished, "\(id) never flagged")
        }
    }

    @Test(arguments: StoreEngine.available)
    func refundsAreJudgedRightInAnyOrderAndAReversalGrantsAgainOnce(_ engine: StoreEngine) async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await engine.freshURL())
        let signer = JWSSigner(pki: pki)
        let early = try signer.sign(AppStorePayloads.transaction(transactionId: "8200001", productId: "coins.100", bundleId: Self.bundle))
        let later = try signer.sign(AppStorePayloads.transaction(transactionId: "8200002", productId: "coins.1000", bundleId: Self.bundle))
        let earlyKey = PurchaseKey(store: .appstore, transactionId: "8200001")
        let laterKey = PurchaseKey(store: .appstore, transactionId: "8200002")

        // The refund of a purchase the pipeline has not seen, then the purchase (the user kept the signed transaction).
        try await send([try notification(pipeline, signer, .refund, transaction: early)], servers: servers)
        try await waitUntil("the refund is recorded before its purchase") { try await pipeline.store.lifecycleState(of: earlyKey) == .revokedUnseen }
        try await send([try submission(pipeline, early, user: "user-r"), try submission(pipeline, later, user: "user-r")], servers: servers)
        try await waitUntil("the later purchase is finished") { try await pipeline.store.purchase(laterKey)?.state == .finished }
        #expect(try await pipeline.store.purchase(earlyKey)?.state == .revoked, "refused, never granted")
        #expect(try await pipeline.store.balances(of: "user-r") == ["coins": 1000])

        // A refund of the later purchase, then the store reverses it (twice: Apple retries notifications).
        try await send([try notification(pipeline, signer, .refund, transaction: later)], servers: servers)
        try await waitUntil("refunded") { try await pipeline.store.purchase(laterKey)?.state == .revoked }
        #expect(try await pipeline.store.balances(of: "user-r") == ["coins": 0])
        try await send([try notification(pipeline, signer, .refundReversed, transaction: later),
                        try notification(pipeline, signer, .refundReversed, transaction: later),
                        try notification(pipeline, signer, .refundDeclined, transaction: later)], servers: servers)
        try await waitUntil("granted again") { try await pipeline.store.purchase(laterKey)?.state == .finished }
        // The second reversal and the declined refund are handled once the granter is past them on the partition.
        try await waitUntil("every notification handled") { pipeline.runners[1].counters.withLock { $0["handled", default: 0] } >= 5 }
        try await waitUntil("the re-grant finished with the store") { pipeline.appStore.finished.count >= 2 }
        try await pipeline.stop()
        #expect(try await pipeline.store.balances(of: "user-r") == ["coins": 1000], "granted again exactly once")
        let audit = try await pipeline.store.audit()
        #expect(audit.balanceMismatches.isEmpty && audit.finishedWithoutGrant.isEmpty, "\(audit.balanceMismatches) \(audit.finishedWithoutGrant)")
        // Finished at its grant, and again at its re-grant (a repeat the store answers as the first, see ReinstatedFinishingTests).
        #expect(pipeline.appStore.finished == ["8200002", "8200002"], "the refused purchase is never finished with the store")
    }

    @Test func aSubscriptionIsExtendedByItsRenewalAndEndedByItsExpiry() async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await StoreEngine.sqlite.freshURL())
        let signer = JWSSigner(pki: pki)
        let start = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 25 * 86_400).rounded()) // whole milliseconds, as signed
        func period(_ id: String, from: Date, days: Double = 30) throws -> String {
            try signer.sign(AppStorePayloads.transaction(transactionId: id, originalTransactionId: "8300001", productId: "pass.monthly", bundleId: Self.bundle,
                                                         type: .autoRenewable, purchaseDate: from,
                                                         extra: ["expiresDate": .integer(AppStorePayloads.milliseconds(from.addingTimeInterval(days * 86_400)))]))
        }
        let first = try period("8300001", from: start)
        let renewal = try period("8300002", from: start.addingTimeInterval(30 * 86_400))
        try await send([try submission(pipeline, first, user: "user-s")], servers: servers)
        try await waitUntil("subscribed") { try await pipeline.store.entitlements(of: "user-s")["pass"] == .some(start.addingTimeInterval(30 * 86_400)) }

        // DID_RENEW: the store announces the next period; it is granted to the subscription's owner.
        try await send([try notification(pipeline, signer, .didRenew, transaction: renewal)], servers: servers)
        try await waitUntil("extended") { try await pipeline.store.entitlements(of: "user-s")["pass"] == .some(start.addingTimeInterval(60 * 86_400)) }
        #expect(try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: "8300002"))?.userId == "user-s")

        // RENEWAL_EXTENDED: the operator compensated an outage with 14 more days; the period is signed again with its new expiry.
        let extended = try period("8300002", from: start.addingTimeInterval(30 * 86_400), days: 44)
        let answers = Recorder()
        let watcher = RunningConsumer(try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: uniqueName("w"),
                                                                             topics: [pipeline.codec.topic(.itemGranted)]))) { await answers.record($0) }
        try await send([try notification(pipeline, signer, .renewalExtended, transaction: extended)], servers: servers)
        try await waitUntil("extended by the store") { try await pipeline.store.entitlements(of: "user-s")["pass"] == .some(start.addingTimeInterval(74 * 86_400)) }
        #expect(try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: "8300002"))?.expiresDate == start.addingTimeInterval(74 * 86_400))
        try await waitUntil("the extension answered") { await answers.messages.contains { $0.header("ce_id")?.hasPrefix("extended:appstore:8300002:") == true } }
        try await watcher.stop()

        // DID_FAIL_TO_RENEW in a billing grace period (GRACE_PERIOD): the period lasts until the grace period ends, which its
        // renewal info says.
        let graceEnd = start.addingTimeInterval(90 * 86_400)
        let grace = try signer.sign(AppStorePayloads.renewalInfo(originalTransactionId: "8300001", productId: "pass.monthly", gracePeriodExpiresDate: graceEnd))
        try await send([try notification(pipeline, signer, .didFailToRenew, subtype: "GRACE_PERIOD", transaction: extended, renewalInfo: grace)], servers: servers)
        try await waitUntil("through the grace period") { try await pipeline.store.entitlements(of: "user-s")["pass"] == .some(graceEnd) }

        try await send([try notification(pipeline, signer, .expired, transaction: renewal)], servers: servers)
        try await waitUntil("ended") { try await pipeline.store.entitlements(of: "user-s").isEmpty }
        try await pipeline.stop()
        #expect(try await pipeline.store.balances(of: "user-s").isEmpty)
    }
}

extension PipelineTests {
    /// A subscription refunded before its grant, then the refund reversed: granted again until the expiry its verified
    /// transaction carries, never for good.
    @Test(arguments: StoreEngine.available)
    func aSubscriptionRefundedBeforeItsGrantIsReinstatedUntilItsExpiry(_ engine: StoreEngine) async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await engine.freshURL())
        let signer = JWSSigner(pki: pki)
        let start = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 5 * 86_400).rounded()) // whole milliseconds, as signed
        let expires = start.addingTimeInterval(30 * 86_400)
        let key = PurchaseKey(store: .appstore, transactionId: "8700001")
        func signed(revokedAt: Date?) throws -> String {
            try signer.sign(AppStorePayloads.transaction(transactionId: "8700001", productId: "pass.monthly", bundleId: Self.bundle, type: .autoRenewable,
                                                         purchaseDate: start, revocationDate: revokedAt,
                                                         extra: ["expiresDate": .integer(AppStorePayloads.milliseconds(expires))]))
        }
        try await send([try submission(pipeline, try signed(revokedAt: start.addingTimeInterval(3600)), user: "user-rs")], servers: servers)
        // The first answer waits for the workers to join their groups too.
        try await waitUntil("refunded before its grant", timeout: .seconds(120)) { try await pipeline.store.purchase(key)?.state == .revoked }
        try await send([try notification(pipeline, signer, .refundReversed, transaction: try signed(revokedAt: nil))], servers: servers)
        try await waitUntil("granted again") { try await pipeline.store.purchase(key)?.state == .finished }
        try await pipeline.stop()
        let held = try await pipeline.store.entitlements(of: "user-rs")
        #expect(held == ["pass": expires], "until its expiry, not for good: \(held)")
    }

    /// Family Sharing: each family member gets a transaction of their own (`FAMILY_SHARED`), granted to the
    /// member's user like any purchase; a REVOKE of it (the member left the family, sharing stopped) ends the
    /// member's entitlement and leaves the purchaser's.
    @Test func aFamilySharedEntitlementIsTheMembersAndARevokeEndsOnlyIt() async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await StoreEngine.sqlite.freshURL())
        let signer = JWSSigner(pki: pki)
        let purchased = try signer.sign(AppStorePayloads.transaction(transactionId: "8600001", productId: "adfree", bundleId: Self.bundle, type: .nonConsumable))
        let shared = try signer.sign(AppStorePayloads.transaction(transactionId: "8600002", productId: "adfree", bundleId: Self.bundle, type: .nonConsumable,
                                                                  extra: ["inAppOwnershipType": .string("FAMILY_SHARED")]))
        try await send([try submission(pipeline, purchased, user: "parent"), try submission(pipeline, shared, user: "child")], servers: servers)
        try await waitUntil("both have ad-free") {
            let parent = try await pipeline.store.entitlements(of: "parent"), child = try await pipeline.store.entitlements(of: "child")
            return parent.keys.contains("adfree") && child.keys.contains("adfree")
        }
        let revoked = try signer.sign(AppStorePayloads.transaction(transactionId: "8600002", productId: "adfree", bundleId: Self.bundle, type: .nonConsumable,
                                                                   revocationDate: Date(), extra: ["inAppOwnershipType": .string("FAMILY_SHARED")]))
        try await send([try notification(pipeline, signer, .revoke, transaction: revoked)], servers: servers)
        try await waitUntil("the member's sharing ended") { try await pipeline.store.entitlements(of: "child").isEmpty }
        // Granted is not yet finished: the finisher's turn may come after the revocation's.
        try await waitUntil("the purchaser's is finished") {
            try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: "8600001"))?.state == .finished
        }
        try await pipeline.stop()
        #expect(try await pipeline.store.entitlements(of: "parent").keys.sorted() == ["adfree"], "the purchaser keeps it")
        #expect(try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: "8600002"))?.state == .revoked)
    }

    @Test(arguments: RestorePolicy.allCases)
    func anAdFreeRestoreUnderANewUserIdFollowsTheRestorePolicy(_ policy: RestorePolicy) async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await StoreEngine.sqlite.freshURL(), restorePolicy: policy)
        let signer = JWSSigner(pki: pki)
        let token = "3f0a2f2e-8a7c-4c1e-9d57-00000000aaaa"
        let adfree = try signer.sign(AppStorePayloads.transaction(transactionId: "8400001", productId: "adfree", bundleId: Self.bundle,
                                                                  type: .nonConsumable, appAccountToken: token))
        let coins = try signer.sign(AppStorePayloads.transaction(transactionId: "8400002", productId: "coins.100", bundleId: Self.bundle))
        try await send([try submission(pipeline, adfree, user: "install-1", token: AccountToken(token)), try submission(pipeline, coins, user: "install-1")], servers: servers)
        try await waitUntil("both finished") { try await pipeline.store.statistics().purchasesByState[.finished] == 2 }

        // The app reinstalled without login: a new user id restores both. A leaked copy under another account's token is refused.
        try await send([try submission(pipeline, adfree, user: "thief", source: .restore, token: "3f0a2f2e-8a7c-4c1e-9d57-00000000bbbb"),
                        try submission(pipeline, adfree, user: "install-2", source: .restore),
                        try submission(pipeline, coins, user: "install-2", source: .restore),
                        try submission(pipeline, adfree, user: "install-2", source: .restore)], servers: servers)
        try await waitUntil("the four restores handled") { pipeline.runners[0].counters.withLock { $0["handled", default: 0] } >= 6 }
        try await pipeline.stop()
        let owner: UserID = policy == .transfer ? "install-2" : "install-1"
        #expect(try await pipeline.store.entitlements(of: owner).keys.sorted() == ["adfree"])
        #expect(try await pipeline.store.entitlements(of: policy == .transfer ? "install-1" : "install-2").isEmpty, "one owner at a time")
        #expect(try await pipeline.store.entitlements(of: "thief").isEmpty, "another account's token")
        #expect(try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: "8400001"))?.userId == owner)
        #expect(try await pipeline.store.balances(of: "install-2").isEmpty, "coins are never granted again")
        #expect(try await pipeline.store.balances(of: "install-1") == ["coins": 100])
    }
}

import Foundation
import Ingest
import JSON
import Kafka
import PipelineHarness
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import Stages
import StoreFixtures
import StoreVerification
import WorkerRuntime

/// The demo's third act, "the webhook was down": the App Store's notifications for a set of users never reach the
/// ingest — a refund, a renewal, an expiry, a billing grace period — and an app dies right after the payment of a charge
/// the store announces (one whose account token an earlier purchase bound to its user, one nobody's). The store keeps
/// them in its history (a stand-in App Store Server API in the demo process); one reconciliation pass publishes them,
/// and each user's holdings read back as the store says; a second pass publishes nothing. Then a player taps *Restore
/// Purchases* for coins bought on another device that no app submitted and no notification announced: the ingest's sync
/// reads the store's history of the player's account and the pipeline grants them, once (a second sync at once is refused: 429).
struct DemoWebhookDown {
    static let refunded = "3200000000001", subscribed = "3200000000011", renewal = "3200000000012", expiring = "3200000000021"
    static let lapsed = "3200000000031", earlier = "3200000000041", charged = "3200000000042", nobodys = "3200000000051"
    static let token = "5e0c2a31-7d4f-4b8e-9a61-00000000d1ed"
    static let restoreFirst = "3200000000061", restoreOtherDevice = "3200000000062", restoreToken = "5e0c2a31-7d4f-4b8e-9a61-0000000e5701"

    let appStore: DemoAppStoreData
    var now: Date { appStore.now }

    private var renewedUntil: Date { now.addingTimeInterval(30 * 86_400 - 3600) }
    private var graceEnd: Date { now.addingTimeInterval(6 * 86_400) }

    /// Each story's user and what they own at the end.
    var expected: [UserID: DemoProductTypes.Holdings] {
        [
            "webhook-refund": .init(),
            "webhook-renewal": .init(entitlements: ["pass": renewedUntil]),
            "webhook-expired": .init(),
            "webhook-grace": .init(entitlements: ["pass": graceEnd]),
            "app-died": .init(balances: ["coins": 600]), // 100 bought before, 500 the charge its app never submitted
            "restore-player": .init(balances: ["coins": 600]), // 100 submitted, 500 bought on another device and restored
        ]
    }

    /// Step 1, delivered as usual: the purchases the lost notifications are about, and the apps' consumption reports.
    func purchases() throws -> [any PipelineEvent] {
        [
            try appStore.submission(Self.refunded, "coins.100", .consumable, user: "webhook-refund", purchased: now.addingTimeInterval(-7200)),
            try appStore.submission(Self.subscribed, "pass.monthly", .autoRenewable, user: "webhook-renewal", purchased: now.addingTimeInterval(-30 * 86_400 - 3600),
                           expires: now.addingTimeInterval(-3600)),
            try appStore.submission(Self.expiring, "pass.monthly", .autoRenewable, user: "webhook-expired", purchased: now.addingTimeInterval(-20 * 86_400),
                           expires: now.addingTimeInterval(10 * 86_400)),
            try appStore.submission(Self.lapsed, "pass.monthly", .autoRenewable, user: "webhook-grace", purchased: now.addingTimeInterval(-30 * 86_400 - 3600),
                           expires: now.addingTimeInterval(-3600)),
            try appStore.submission(Self.earlier, "coins.100", .consumable, user: "app-died", purchased: now.addingTimeInterval(-7200), token: Self.token),
            PurchaseConsumed(store: .appstore, transactionId: TransactionID(Self.refunded), userId: "webhook-refund", consumedAt: now),
            PurchaseConsumed(store: .appstore, transactionId: TransactionID(Self.earlier), userId: "app-died", consumedAt: now),
        ]
    }

    /// The notifications the App Store sent half an hour ago and the ingest never received, as its history lists them.
    func lostNotifications() throws -> [String] {
        let renewalInfo = try appStore.signer.sign(AppStorePayloads.renewalInfo(originalTransactionId: Self.lapsed, productId: "pass.monthly",
                                                                       gracePeriodExpiresDate: graceEnd))
        return [
            try notification(.refund, transaction: try transaction(Self.refunded, "coins.100", .consumable, purchased: now.addingTimeInterval(-7200),
                                                                   revoked: true)),
            try notification(.didRenew, transaction: try transaction(Self.renewal, "pass.monthly", .autoRenewable, original: Self.subscribed,
                                                                     purchased: now.addingTimeInterval(-3600), expires: renewedUntil)),
            try notification(.expired, subtype: "VOLUNTARY", transaction: try transaction(Self.expiring, "pass.monthly", .autoRenewable,
                                                                                          purchased: now.addingTimeInterval(-20 * 86_400),
                                                                                          expires: now.addingTimeInterval(10 * 86_400))),
            try notification(.didFailToRenew, subtype: "GRACE_PERIOD",
                             transaction: try transaction(Self.lapsed, "pass.monthly", .autoRenewable, purchased: now.addingTimeInterval(-30 * 86_400 - 3600),
                                                          expires: now.addingTimeInterval(-3600)), renewalInfo: renewalInfo),
            try notification(.oneTimeCharge, transaction: try transaction(Self.charged, "coins.500", .consumable, purchased: now.addingTimeInterval(-1800),
                                                                          token: Self.token)),
            try notification(.oneTimeCharge, transaction: try transaction(Self.nobodys, "coins.100", .consumable, purchased: now.addingTimeInterval(-1800),
                                                                          token: "5e0c2a31-7d4f-4b8e-9a61-0000000000ff")),
        ]
    }

    /// Plays the act: the purchases, the store's history, a reconciliation pass, then a second one. Violations, if any.
    func play(store: SQLPurchaseStore, reconciler: StoreReconciler<ContinuousClock>, history: AppStoreServerAPIStandIn,
              send: ([any PipelineEvent]) async throws -> Void, say: (String) -> Void) async throws -> (first: StoreReconciler<ContinuousClock>.Pass?, second: StoreReconciler<ContinuousClock>.Pass?) {
        func state(_ id: String) async throws -> PurchaseState { try await store.lifecycleState(of: PurchaseKey(store: .appstore, transactionId: TransactionID(id))) }
        try await send(try purchases())
        try await waitFor(say, "third act: the purchases the lost notifications are about, finished", timeout: 300) {
            var states: [PurchaseState] = []
            for id in [Self.refunded, Self.subscribed, Self.expiring, Self.lapsed, Self.earlier] { states.append(try await state(id)) }
            return states.allSatisfy { $0 == .finished } ? nil : "states \(states.map(\.rawValue))"
        }
        let sent = now.addingTimeInterval(-1800)
        for payload in try lostNotifications() { history.recordNotification(payload, at: sent) }
        let first = try await reconciler.reconcileOnce()["Sandbox"]
        say("the webhook was down: a pass over the App Store's history published \(first?.recovered ?? 0) of \(first?.listed ?? 0) notifications")
        try await waitFor(say, "refunded, renewed, expired, in grace, the token's charge granted, the other kept unclaimed", timeout: 300) {
            let (refund, renewal, charged, nobodys) = (try await state(Self.refunded), try await state(Self.renewal), try await state(Self.charged),
                                                       try await state(Self.nobodys))
            let expired = try await store.entitlements(of: "webhook-expired").isEmpty
            let grace = try await store.entitlements(of: "webhook-grace")["pass"] == .some(graceEnd)
            return refund == .revoked && renewal == .finished && charged == .granted && nobodys == .unclaimed && expired && grace ? nil
                : "refund \(refund), renewal \(renewal), charge \(charged), unknown token's charge \(nobodys), expired \(expired), grace \(grace)"
        }
        let second = try await reconciler.reconcileOnce()["Sandbox"]
        return (first, second)
    }

    /// The restore: the player's first purchase submitted as usual; the one on another device only in the store's records;
    /// the sync (`POST /v1/users/{userId}/sync`, signed), then a second. Violations, if any.
    func restore(store: SQLPurchaseStore, history: AppStoreServerAPIStandIn, ingest: String, secret: Data, send: ([any PipelineEvent]) async throws -> Void,
                 say: (String) -> Void) async throws -> (violations: [String], submitted: Int) {
        let purchased = now.addingTimeInterval(-3 * 3600)
        let first = try transaction(Self.restoreFirst, "coins.100", .consumable, purchased: purchased, token: Self.restoreToken)
        let otherDevice = try transaction(Self.restoreOtherDevice, "coins.500", .consumable, purchased: purchased.addingTimeInterval(3600), token: Self.restoreToken)
        history.recordTransaction(first, transactionId: TransactionID(Self.restoreFirst), originalTransactionId: TransactionID(Self.restoreFirst), customer: "restore")
        history.recordTransaction(otherDevice, transactionId: TransactionID(Self.restoreOtherDevice), originalTransactionId: TransactionID(Self.restoreOtherDevice),
                                  customer: "restore")
        try await send([PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: first, userId: "restore-player", submittedAt: now,
                                          source: .client, appAccountToken: AccountToken(Self.restoreToken))])
        func granted(_ id: String) async throws -> Bool {
            [.granted, .finished].contains(try await store.lifecycleState(of: PurchaseKey(store: .appstore, transactionId: TransactionID(id))))
        }
        try await waitFor(say, "restore: the player's first purchase granted", timeout: 300) { try await granted(Self.restoreFirst) ? nil : "not yet" }
        func sync() async throws -> (status: Int, submitted: Int?) {
            let (status, body) = try await UserHoldingsAPI.fetch("restore-player", ingest: ingest, secret: secret, .sync)
            return (status, JSONValue.parse(Array(body))?.objectValue?["submitted"]?.int64Value.map { Int($0) })
        }
        let synced = try await sync()
        try await waitFor(say, "restore: the purchase made on another device granted", timeout: 300) {
            try await granted(Self.restoreOtherDevice) ? nil : "not yet"
        }
        say("restore purchases: a sync with the App Store submitted \(synced.submitted ?? 0) purchase made on another device; granted")
        var violations: [String] = []
        if synced.status != 202 || synced.submitted != 1 { violations.append("the restore's sync answered \(synced.status) and submitted \(synced.submitted ?? -1), expected 202 and 1") }
        // A second sync at once is refused (429): one per user a minute.
        let again = try await sync()
        if again.status != 429 { violations.append("a second sync within a minute answered \(again.status), expected 429") }
        return (violations, synced.submitted ?? 0)
    }

    private func transaction(_ id: String, _ product: String, _ type: AppStoreProductType, original: String? = nil, purchased: Date,
                             expires: Date? = nil, revoked: Bool = false, token: String? = nil) throws -> String {
        try appStore.transaction(id, product, type, original: original, purchased: purchased, expires: expires,
                                 revokedAt: revoked ? now.addingTimeInterval(-1800) : nil, token: token)
    }

    /// Sent half an hour ago.
    private func notification(_ type: AppStoreNotificationType, subtype: String? = nil, transaction: String, renewalInfo: String? = nil) throws -> String {
        try appStore.notification(type, subtype: subtype, transaction: transaction, renewalInfo: renewalInfo, signedDate: now.addingTimeInterval(-1800))
    }
}

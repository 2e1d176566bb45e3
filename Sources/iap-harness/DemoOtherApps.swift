import Foundation
import JSON
import PipelineHarness
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StoreFixtures
import StoreVerification

/// The demo's fourth act: a game sold on Google Play alone (an app of the demo's apps file with no App Store or AppCoins
/// section), and a second App Store game, in the same deployment. The Android player buys coins and a monthly pass on Google Play (a stand-in Android Publisher
/// API in the demo process): the coins are consumed and the pass acknowledged, once each; Google renews the pass and
/// tells of it only by a real-time developer notification, pushed to the ingest with Google's OIDC token (a forged
/// push is refused). The second game's player buys hints, granted by that game's own catalog.
struct DemoOtherApps {
    static let android: UserID = "android-player", puzzlePlayer: UserID = "puzzle-player"
    static let package = DemoCommand.bundleId, puzzleBundle = "com.example.puzzle"
    /// The apps file's id of the game sold on Google Play alone.
    static let androidApp = "android-coins"
    static let coinsToken: PurchaseToken = "demo-gp-coins-token", coinsOrder: TransactionID = "GPA.3300-0000-0000-00001"
    static let passToken: PurchaseToken = "demo-gp-pass-token", signup: TransactionID = "GPA.3300-0000-0000-00002..0", renewal: TransactionID = "GPA.3300-0000-0000-00002..1"
    static let puzzleTransaction = "3300000000001"

    let now: Date
    let googlePlay: GooglePlayAPIStandIn
    let licensing: GooglePlaySigner
    let google: GooglePlayPush
    let appStore: JWSSigner

    init(pki: TestPKI, now: Date) throws {
        // Whole seconds: expiries are compared with what the store kept, in milliseconds.
        let now = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        self.now = now
        googlePlay = try GooglePlayAPIStandIn(purchases: [
            Self.coinsToken: .init(packageName: PackageName(Self.package), productId: "coins.100", orderId: Self.coinsOrder, purchaseTime: now),
        ])
        googlePlay.set(Self.passToken, .init(packageName: PackageName(Self.package), productId: "pass.monthly", latestOrderId: Self.signup, startTime: now,
                                             expiryTime: now.addingTimeInterval(30 * 86_400)))
        licensing = try GooglePlaySigner()
        google = try GooglePlayPush()
        appStore = JWSSigner(pki: pki)
    }

    private var renewedUntil: Date { now.addingTimeInterval(60 * 86_400) }

    /// What `GET /v1/users/{userId}` must answer for the act's players at the end.
    var expected: [UserID: DemoProductTypes.Holdings] {
        [Self.android: .init(balances: ["coins": 100], entitlements: ["pass": renewedUntil]), Self.puzzlePlayer: .init(balances: ["puzzle.hints": 10])]
    }

    /// The workers' settings for Google Play: the app's licensing key, the service account, the API, the push.
    func settings(in directory: URL) throws -> (licensingKey: URL, environment: [String: String]) {
        let key = directory.appendingPathComponent("googleplay-key.txt"), account = directory.appendingPathComponent("service-account.json")
        try Data(try licensing.publicKeyBase64().utf8).write(to: key)
        try Data(try googlePlay.serviceAccountKeyJSON().utf8).write(to: account)
        return (key, try google.environment(in: directory).merging(["IAP_GOOGLEPLAY_SERVICE_ACCOUNT_FILE": account.path,
                                                                     "IAP_GOOGLEPLAY_API_URL": googlePlay.baseURL.absoluteString]) { _, new in new })
    }

    /// Plays the act; what did not happen as it should.
    func play(store: SQLPurchaseStore, ingest: String, send: ([any PipelineEvent]) async throws -> Void, say: (String) -> Void) async throws -> [String] {
        var violations: [String] = []
        func submission(_ token: PurchaseToken, _ product: ProductID, order: TransactionID) throws -> PurchaseSubmitted {
            let signed = try licensing.sign(packageName: Self.package, productId: product.rawValue, purchaseToken: token.rawValue, orderId: order.rawValue,
                                            purchaseTime: now)
            return PurchaseSubmitted(store: .googleplay, kind: .googlePlayPurchase,
                                     googleplay: .init(packageName: PackageName(Self.package), productId: product, purchaseToken: token,
                                                       purchaseData: signed.purchaseData, signature: signed.signature),
                                     userId: Self.android, submittedAt: now, source: .client)
        }
        let hints = try appStore.sign(AppStorePayloads.transaction(transactionId: Self.puzzleTransaction, productId: "puzzle.hints10", bundleId: Self.puzzleBundle,
                                                                   environment: .sandbox, type: .consumable, purchaseDate: now))
        try await send([try submission(Self.coinsToken, "coins.100", order: Self.coinsOrder), try submission(Self.passToken, "pass.monthly", order: Self.signup),
                        PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: hints, userId: Self.puzzlePlayer, submittedAt: now,
                                          source: .client)])
        try await PipelineHarness.waitFor(say, "Google Play coins consumed, the pass acknowledged, the second game's hints granted", timeout: 120) {
            let states = [try await storeState(.googleplay, Self.coinsOrder, in: store), try await storeState(.googleplay, Self.signup, in: store),
                          try await storeState(.appstore, TransactionID(Self.puzzleTransaction), in: store)]
            return states == [.finished, .finished, .granted] ? nil : "states \(states.map { $0?.rawValue ?? "none" })"
        }

        // Google renews the pass and says so only by a real-time developer notification, pushed to the ingest.
        googlePlay.set(Self.passToken, .init(packageName: PackageName(Self.package), productId: "pass.monthly", latestOrderId: Self.renewal, startTime: now,
                                             expiryTime: renewedUntil, acknowledged: true))
        let renewed = GooglePlayPushSigner.notification(package: Self.package, "subscriptionNotification", [
            "version": .string("1.0"), "notificationType": .integer(2), "purchaseToken": .string(Self.passToken.rawValue), "subscriptionId": .string("pass.monthly")])
        let forger = try GooglePlayPushSigner(keyID: google.signer.keyID)
        let forged = try await google.send([renewed], to: ingest,
                                           authorization: try forger.authorization(audience: GooglePlayPush.audience, email: GooglePlayPush.serviceAccount))
        if forged != [401] { violations.append("a push with a forged OIDC token was answered \(forged), expected 401") }
        let pushed = try await google.send([renewed], to: ingest)
        if pushed != [200] { violations.append("Google's push of the renewal was answered \(pushed), expected 200") }
        try await PipelineHarness.waitFor(say, "the renewal Google told of granted and finished", timeout: 120) {
            try await storeState(.googleplay, Self.renewal, in: store) == .finished ? nil : "renewal \(try await storeState(.googleplay, Self.renewal, in: store)?.rawValue ?? "none")"
        }
        if googlePlay.consumeCount(Self.coinsToken) != 1 { violations.append("the Google Play coins were consumed \(googlePlay.consumeCount(Self.coinsToken)) times, expected once") }
        if googlePlay.subscriptionAcknowledgeCount(Self.passToken) != 1 {
            violations.append("the Google Play pass was acknowledged \(googlePlay.subscriptionAcknowledgeCount(Self.passToken)) times, expected once")
        }
        say("fourth act: an Android-only game's player's coins and pass on Google Play (renewed by a pushed notification), a second game's hints")
        return violations
    }

    private func storeState(_ storeName: Store, _ id: TransactionID, in store: SQLPurchaseStore) async throws -> PurchaseState? {
        try await store.purchase(PurchaseKey(store: storeName, transactionId: id))?.state
    }

    /// Purchases by app and store, from the store's books.
    static func countsByAppAndStore(_ audit: StoreAudit) -> JSONValue {
        var counts: [String: [String: Int64]] = [:]
        for (key, purchase) in audit.purchases { counts[purchase.app?.rawValue ?? "(primary)", default: [:]][key.store.rawValue, default: 0] += 1 }
        return .object(counts.mapValues { .object($0.mapValues(JSONValue.integer)) })
    }
}

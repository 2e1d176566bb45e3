import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreFixtures
import StoreVerification

/// The demo's second act: one user per story of what was bought, each a case where a type-blind or
/// order-blind pipeline would get the money wrong — an ad-free purchase bought two days ago and restored under a
/// new install's user id, a monthly subscription renewed by `DID_RENEW`, another ended by `EXPIRED`, coins bought
/// through AppCoins (a stand-in API in the demo process) and through a StoreKit 1 receipt, a refund that arrives
/// before its purchase, and a refund the App Store reverses. `expected` is what each user owns at the end.
struct DemoProductTypes {
    /// What a user owns: currency balances, and entitlements in force with their expiry (nil: for good).
    struct Holdings: Equatable {
        var balances: [String: Int64] = [:]
        var entitlements: [String: Date?] = [:]
    }

    static let packageName = DemoCommand.bundleId
    static let adfree = "3100000000001", subscribed = "3100000000011", renewal = "3100000000012", cancelled = "3100000000021"
    static let receipt = "3100000000031", refundedFirst = "3100000000041", reversed = "3100000000051"
    static let appCoinsToken = "demo-appcoins-token-1", appCoinsOrder = "demo.appcoins.order.1"

    let now: Date
    let appStore: DemoAppStoreData
    let receiptSigner: ReceiptSigner
    /// The demo app's AppCoins key: the verifier is given its public half, as from the store's back office.
    let appCoinsSigner: AppCoinsSigner

    init(pki: TestPKI, now: Date) throws {
        // Whole seconds: expiries are compared with what the store kept, in milliseconds.
        self.now = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        appStore = DemoAppStoreData(signer: JWSSigner(pki: pki), now: self.now)
        receiptSigner = ReceiptSigner(pki: pki)
        appCoinsSigner = try AppCoinsSigner()
    }

    private var renewedUntil: Date { now.addingTimeInterval(30 * 86_400 - 3600) }

    /// Each story's user and what `GET /v1/users/{userId}` must answer for them at the end.
    var expected: [UserID: Holdings] {
        [
            "adfree-install-1": Holdings(), // restored under the new install's id: moved (restore policy transfer)
            "adfree-install-2": Holdings(entitlements: ["adfree": nil]),
            "subscriber-renewed": Holdings(entitlements: ["pass": renewedUntil]),
            "subscriber-expired": Holdings(),
            "appcoins-player": Holdings(balances: ["coins": 100]),
            "receipt-player": Holdings(balances: ["coins": 500]),
            "refund-first": Holdings(),
            "reversal-player": Holdings(balances: ["coins": 100]),
        ]
    }

    /// The AppCoins purchase as the store knows it.
    var appCoinsPurchases: [PurchaseToken: AppCoinsAPIStandIn.Purchase] {
        [PurchaseToken(Self.appCoinsToken): .init(packageName: PackageName(Self.packageName), sku: "coins.100", orderId: TransactionID(Self.appCoinsOrder), purchaseTime: now)]
    }

    /// Step 1: the purchases, and a REFUND for a purchase not submitted yet.
    func purchases() throws -> [any PipelineEvent] {
        let twoDaysAgo = now.addingTimeInterval(-2 * 86_400)
        // A sandbox receipt in Apple's shape (the demo's verifier runs in Sandbox).
        let receipt = try receiptSigner.sign(AppReceipt(
            receiptType: ReceiptSigner.sandbox, bundleId: BundleID(DemoCommand.bundleId), appVersion: "1", originalAppVersion: "1.0", creationDate: now,
            inAppPurchases: [InAppPurchaseReceipt(quantity: 1, productId: "coins.500", transactionId: TransactionID(Self.receipt), originalTransactionId: TransactionID(Self.receipt),
                                                  purchaseDate: now.addingTimeInterval(-60), originalPurchaseDate: now.addingTimeInterval(-60))]))
        let appCoins = try appCoinsSigner.sign(packageName: Self.packageName, sku: "coins.100", purchaseToken: Self.appCoinsToken, orderId: Self.appCoinsOrder,
                                               purchaseTime: now)
        return [
            try appStore.submission(Self.adfree, "adfree", .nonConsumable, user: "adfree-install-1", purchased: twoDaysAgo),
            try appStore.submission(Self.subscribed, "pass.monthly", .autoRenewable, user: "subscriber-renewed", purchased: now.addingTimeInterval(-30 * 86_400 - 3600),
                           expires: now.addingTimeInterval(-3600)),
            try appStore.submission(Self.cancelled, "pass.monthly", .autoRenewable, user: "subscriber-expired", purchased: now.addingTimeInterval(-20 * 86_400),
                           expires: now.addingTimeInterval(10 * 86_400)),
            PurchaseSubmitted(store: .appcoins, kind: .appcoinsPurchase,
                              appcoins: .init(packageName: PackageName(Self.packageName), sku: "coins.100", purchaseToken: PurchaseToken(Self.appCoinsToken),
                                              purchaseData: appCoins.purchaseData, signature: appCoins.signature),
                              userId: "appcoins-player", submittedAt: now, source: .client),
            PurchaseSubmitted(store: .appstore, kind: .appReceipt, receipt: receipt, userId: "receipt-player", submittedAt: now, source: .client),
            try appStore.submission(Self.reversed, "coins.100", .consumable, user: "reversal-player", purchased: now),
            try notification(.refund, Self.refundedFirst, "coins.100", revoked: true),
        ]
    }

    /// Step 2: the restore under a new install's user id, the renewal and the expiry, the apps' consumption reports,
    /// and the refunded purchase's late submission.
    func followUps() throws -> [any PipelineEvent] {
        [
            try appStore.submission(Self.adfree, "adfree", .nonConsumable, user: "adfree-install-2", purchased: now.addingTimeInterval(-2 * 86_400), source: .restore),
            try notification(.didRenew, Self.renewal, "pass.monthly", original: Self.subscribed, type: .autoRenewable, purchased: now.addingTimeInterval(-3600),
                             expires: renewedUntil),
            try notification(.expired, Self.cancelled, "pass.monthly", type: .autoRenewable, purchased: now.addingTimeInterval(-20 * 86_400),
                             expires: now.addingTimeInterval(10 * 86_400)),
            PurchaseConsumed(store: .appcoins, transactionId: TransactionID(Self.appCoinsOrder), userId: "appcoins-player", consumedAt: now),
            PurchaseConsumed(store: .appstore, transactionId: TransactionID(Self.receipt), userId: "receipt-player", consumedAt: now),
            PurchaseConsumed(store: .appstore, transactionId: TransactionID(Self.reversed), userId: "reversal-player", consumedAt: now),
            try appStore.submission(Self.refundedFirst, "coins.100", .consumable, user: "refund-first", purchased: now.addingTimeInterval(-600)),
        ]
    }

    /// Step 3, then 4: the reversed purchase refunded, then the refund reversed.
    func refund() throws -> any PipelineEvent { try notification(.refund, Self.reversed, "coins.100", revoked: true) }
    func refundReversed() throws -> any PipelineEvent { try notification(.refundReversed, Self.reversed, "coins.100") }

    /// The store's notification of `type` about the transaction `id`, as it arrives now (refunded now with `revoked`).
    private func notification(_ type: AppStoreNotificationType, _ id: String, _ product: String, original: String? = nil,
                              type productType: AppStoreProductType = .consumable, purchased: Date? = nil, expires: Date? = nil,
                              revoked: Bool = false) throws -> StoreNotificationReceived {
        let signed = try appStore.transaction(id, product, productType, original: original, purchased: purchased ?? now.addingTimeInterval(-600),
                                              expires: expires, revokedAt: revoked ? now : nil)
        return StoreNotificationReceived(signedPayload: try appStore.notification(type, transaction: signed), receivedAt: Date())
    }
}

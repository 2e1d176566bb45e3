import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// A Google Play submission: the Play Billing Library's signed purchase data, checked against the app's licensing key,
/// then the purchase read from the Android Publisher API (`subscriptionsv2` for what the app's catalog names a
/// subscription: a submission does not say which it is).
extension GooglePlayVerifier: SubmissionVerifier {
    public var asksTheStoresAPI: Bool { true }
    /// Its submissions, and its notifications (each reads the purchase again).
    public var apiMarkers: [Data] { [Data(SubmissionKind.googlePlayPurchase.rawValue.utf8), Data(Store.googleplay.rawValue.utf8)] }

    public func proven(_ submission: PurchaseSubmitted, apps: AppDirectory?) async -> Result<[VerifiedPurchase], Rejection> {
        guard case .googlePlayPurchase = submission.kind, let purchase = submission.googleplay else { return .failure(StoreVerifiers.wrongKind(submission)) }
        if Self.isSubscription(packageName: purchase.packageName, productId: purchase.productId, apps: apps) {
            return await verifySignedSubscription(packageName: purchase.packageName, productId: purchase.productId, purchaseToken: purchase.purchaseToken,
                                                  purchaseData: purchase.purchaseData, signature: purchase.signature).map { [VerifiedPurchase($0)] }
        }
        return await verifySigned(packageName: purchase.packageName, productId: purchase.productId, purchaseToken: purchase.purchaseToken,
                                  purchaseData: purchase.purchaseData, signature: purchase.signature).map { [VerifiedPurchase($0)] }
    }

    /// Whether the app's catalog names `productId` an auto-renewable subscription: Google keeps subscriptions apart from
    /// one-time products (`subscriptionsv2`).
    static func isSubscription(packageName: PackageName, productId: ProductID, apps: AppDirectory?) -> Bool {
        apps?.app(store: .googleplay, storeName: packageName.rawValue)?.catalog?.product(.googleplay, productId)?.type == .autoRenewable
    }
}

import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// An AppCoins submission: the SDK's signed purchase data, checked against the app's key, then the purchase asked of
/// the AppCoins API.
extension AppCoinsVerifier: SubmissionVerifier {
    public var asksTheStoresAPI: Bool { true }
    public var apiMarkers: [Data] { [Data(SubmissionKind.appcoinsPurchase.rawValue.utf8)] }

    public func proven(_ submission: PurchaseSubmitted, apps: AppDirectory?) async -> Result<[VerifiedPurchase], Rejection> {
        guard case .appcoinsPurchase = submission.kind, let purchase = submission.appcoins else { return .failure(StoreVerifiers.wrongKind(submission)) }
        guard let purchaseData = purchase.purchaseData, let signature = purchase.signature else {
            return .failure(Rejection(.signatureRequired, "an AppCoins submission carries the SDK's purchaseData and its signature"))
        }
        return await verifySigned(packageName: purchase.packageName, sku: purchase.sku, purchaseToken: purchase.purchaseToken,
                                  purchaseData: purchaseData, signature: signature).map { [VerifiedPurchase($0)] }
    }
}

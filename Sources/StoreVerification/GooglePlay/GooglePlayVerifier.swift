import Crypto
import Foundation
import PurchaseDomain

/// Checks Google Play purchases of one-time products and subscriptions of the operator's own apps: a submission is verified
/// (`verifySigned`) only for a package the operator configured, its purchase data signed with that app's licensing key
/// (Play Console, Monetization setup) and naming the package, product and token it claims; then the Android Publisher
/// API confirms it (`verify`, which re-checks also use).
///
/// `purchaseState` 0 verifies; 2 (pending: paid with a method that settles later) is a verdict of its own
/// (`purchasePending`, retryable: asked again until it settles); 1 (canceled) is `purchaseNotCompleted`. 404, 410 and 400
/// are permanent rejections; the network, 401/403 (the service account), 409, 429 and 5xx are retryable.
public final class GooglePlayVerifier: Sendable {
    public struct Configuration: Sendable {
        /// The operator's apps: package name → the app's licensing public key. Purchases of other packages are refused.
        public var apps: [PackageName: PublicKey]

        public init(apps: [PackageName: PublicKey]) { self.apps = apps }
    }

    public let configuration: Configuration
    public let api: AndroidPublisherClient

    public init(configuration: Configuration, api: AndroidPublisherClient) {
        self.configuration = configuration
        self.api = api
    }

    /// A submitted purchase: the package is one of the operator's apps, `signature` (base64) is that app's key's over
    /// `purchaseData` (the purchase's original JSON from the Play Billing Library), which names this package, product and
    /// token; then the API is asked.
    public func verifySigned(packageName: PackageName, productId: ProductID, purchaseToken: PurchaseToken, purchaseData: String, signature: String) async
        -> Result<GooglePlayProductPurchase, Rejection> {
        if let rejection = AndroidPurchaseData.rejection(store: "Google Play", apps: configuration.apps, packageName: packageName, productId: productId,
                                                         purchaseToken: purchaseToken, purchaseData: purchaseData, signature: signature) {
            return .failure(rejection)
        }
        return await verify(packageName: packageName, productId: productId, purchaseToken: purchaseToken)
    }

    /// A submitted subscription purchase, checked as `verifySigned` checks a one-time product's; then
    /// `purchases.subscriptionsv2` is asked.
    public func verifySignedSubscription(packageName: PackageName, productId: ProductID, purchaseToken: PurchaseToken, purchaseData: String,
                                         signature: String) async -> Result<GooglePlaySubscriptionPurchase, Rejection> {
        if let rejection = AndroidPurchaseData.rejection(store: "Google Play", apps: configuration.apps, packageName: packageName, productId: productId,
                                                         purchaseToken: purchaseToken, purchaseData: purchaseData, signature: signature) {
            return .failure(rejection)
        }
        return await verifySubscription(packageName: packageName, productId: productId, purchaseToken: purchaseToken)
    }

    /// The API's view of a subscription (no signature involved: for a notification's re-read and re-checks). Every state
    /// whose period was paid verifies, its expiry saying until when (a lapsed, canceled, paused or held one's is past or
    /// ends access then); a pending signup is `purchasePending`; one whose pending payment was canceled was not completed.
    /// `productId` nil: a notification that does not name it (Google deprecated `subscriptionId`): the answer's product.
    public func verifySubscription(packageName: PackageName, productId: ProductID?, purchaseToken: PurchaseToken) async
        -> Result<GooglePlaySubscriptionPurchase, Rejection> {
        let purchase: GooglePlaySubscriptionPurchase
        switch await api.subscriptionPurchase(packageName: packageName, productId: productId, purchaseToken: purchaseToken) {
        case .success(let answered): purchase = answered
        case .failure(let failure): return .failure(Self.rejection(failure))
        }
        if let productId, purchase.productId != productId {
            return .failure(Rejection(.storeRejected, "the token belongs to product '\(purchase.productId.rawValue.prefix(256))', not '\(productId.rawValue.prefix(256))'"))
        }
        switch purchase.state {
        case .pending: return .failure(Rejection(.purchasePending, retryable: true, "the signup's payment is pending; it is asked about again until it completes"))
        case .pendingPurchaseCanceled: return .failure(Rejection(.purchaseNotCompleted, "the pending signup was canceled before it was paid"))
        default: break
        }
        guard purchase.expiryTime != nil, purchase.latestOrderId != nil else {
            return .failure(Rejection(.storeRejected, "Google Play: subscription in \(purchase.state) without an order or expiry time"))
        }
        return .success(purchase)
    }

    /// What a failed call means for a verification.
    static func rejection(_ failure: AndroidPublisherClient.Failure) -> Rejection {
        switch failure {
        case .unavailable(let why, _): Rejection(.storeUnavailable, retryable: true, why)
        case .refused(404, let detail): Rejection(.storeRejected, "Google Play: no such purchase (\(detail))")
        case .refused(410, let detail): Rejection(.storeRejected, "Google Play: the purchase token is no longer valid (\(detail))")
        case .refused(_, let detail) where failure.isInvalidValue: Rejection(.storeRejected, "Google Play: a value the API does not take, such as a malformed purchase token (\(detail))")
        case .refused(_, let detail): Rejection(.storeRejected, "Google Play: \(detail)")
        }
    }

    /// The API's view of a purchase (no signature involved: for re-checks of purchases verified before).
    public func verify(packageName: PackageName, productId: ProductID, purchaseToken: PurchaseToken) async -> Result<GooglePlayProductPurchase, Rejection> {
        let purchase: GooglePlayProductPurchase
        switch await api.productPurchase(packageName: packageName, productId: productId, purchaseToken: purchaseToken) {
        case .success(let answered): purchase = answered
        case .failure(let failure): return .failure(Self.rejection(failure))
        }
        if let rejection = AndroidPurchaseData.verdict(purchaseState: purchase.purchaseState, answeredProduct: purchase.productId, asked: productId) {
            return .failure(rejection)
        }
        return .success(purchase)
    }
}

import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// A web purchase: the Checkout Session the app's backend submitted, read back from Stripe's API and made by the
/// submitting user.
extension StripeVerifier: SubmissionVerifier {
    public var asksTheStoresAPI: Bool { true }
    /// Its submissions, and its Checkout Session events (each reads the session back).
    public var apiMarkers: [Data] { [Data(SubmissionKind.stripeCheckout.rawValue.utf8), Data("checkout.session.".utf8)] }

    public func proven(_ submission: PurchaseSubmitted, apps: AppDirectory?) async -> Result<[VerifiedPurchase], Rejection> {
        guard case .stripeCheckout = submission.kind, let checkout = submission.stripe else { return .failure(StoreVerifiers.wrongKind(submission)) }
        return await verifyCheckoutSession(checkout.checkoutSessionId, user: submission.userId).map { $0.purchases(store: .stripe) }
    }
}

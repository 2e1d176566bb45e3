import Foundation
import JSON
import PurchaseDomain

/// Checks web purchases made with Stripe Checkout: the app submits the Checkout Session's id (`cs_…`) and the Stripe API
/// confirms it, server to server, with the deployment's secret key (which is the Stripe account's: a session of another
/// account is not found).
///
/// A session verifies only when its `status` is `complete` and its `payment_status` `paid` or `no_payment_required`;
/// `complete` and `unpaid` (a payment method that settles later) is `purchasePending` (retryable: asked again until it
/// settles), or `purchaseNotCompleted` once its payment intent failed; `open` and `expired` are `purchaseNotCompleted`.
/// Its user (`client_reference_id`, else the metadata key `userMetadataKey`) must be the submitting user byte for byte
/// (`wrongUser`); each line item's price must be one an app of the deployment sells, all of one app (`wrongPackage`).
/// Network faults, 409, 429, 5xx and 401/403 are retryable (`storeUnavailable`: a refused key is the deployment's
/// fault, not the purchase's, which waits, retried then parked, for the key to be mended rather than being refused to
/// its buyer); 404 and other 4xx are `storeRejected`.
public final class StripeVerifier: Sendable {
    /// Which Stripe id a verified purchase names as its product (what the apps' catalogs list).
    public enum ProductIdentity: Sendable, Hashable {
        /// The price (`price_…`): one product per price, as a store's product has one price.
        case price
        /// The price's product (`prod_…`): the prices of one product are one product.
        case product
    }

    public struct Configuration: Sendable {
        /// The operator's apps: each app → the Stripe price and product ids it sells. A line item is the app's when its
        /// price or its price's product is listed (ids compared as bytes); one of no app's is refused.
        public var apps: [AppID: Set<String>]
        public var productIdentity: ProductIdentity
        /// The metadata key naming the user when the session has no `client_reference_id`.
        public var userMetadataKey: String

        public init(apps: [AppID: Set<String>], productIdentity: ProductIdentity = .price, userMetadataKey: String = "user_id") {
            self.apps = apps
            self.productIdentity = productIdentity
            self.userMetadataKey = userMetadataKey
        }
    }

    public let configuration: Configuration
    public let api: StripeAPIClient
    /// Each listed id → its app.
    private let appOfId: [StripeIDKey: AppID]

    /// - Throws: `VerifierConfigurationError` for an id two apps list (a purchase of it would be of neither).
    public init(configuration: Configuration, api: StripeAPIClient) throws {
        self.configuration = configuration
        self.api = api
        var appOfId: [StripeIDKey: AppID] = [:]
        for (app, ids) in configuration.apps.sorted(by: { $0.key < $1.key }) {
            for id in ids {
                if let other = appOfId.updateValue(app, forKey: StripeIDKey(id)), other != app {
                    throw VerifierConfigurationError("Stripe id '\(id)' is listed by two apps, '\(other)' and '\(app)'")
                }
            }
        }
        self.appOfId = appOfId
    }

    /// A submission of `sessionId` by `user`: the session's purchases, or why they are not granted.
    public func verifyCheckoutSession(_ sessionId: String, user: UserID) async -> Result<StripeVerifiedCheckout, Rejection> {
        guard StripeAPIClient.isStripeID(sessionId) else { return .failure(Rejection(.storeRejected, "not a Checkout Session id: letters, digits and '_' only")) }
        let session: StripeCheckoutSession
        switch await api.checkoutSession(sessionId) {
        case .success(let answered): session = answered
        case .failure(let failure): return .failure(Self.rejection(failure))
        }
        guard StripeIDKey(session.id) == StripeIDKey(sessionId) else {
            return .failure(Rejection(.storeRejected, "Stripe answered session '\(session.id.prefix(80))' for '\(sessionId)'"))
        }
        if let rejection = Self.paymentRejection(session) ?? userRejection(session, user) { return .failure(rejection) }
        return lineItems(session)
    }

    /// What a failed call means for a verification.
    public static func rejection(_ failure: StripeAPIClient.Failure) -> Rejection {
        switch failure {
        case .unavailable(let why, _): Rejection(.storeUnavailable, retryable: true, why)
        case .refused(404, let detail): Rejection(.storeRejected, "Stripe: no such Checkout Session (\(detail))")
        case .refused(_, let detail): Rejection(.storeRejected, "Stripe: \(detail)")
        }
    }

    /// Why the session's payment does not verify it; nil when it is paid (or needs none).
    static func paymentRejection(_ session: StripeCheckoutSession) -> Rejection? {
        guard session.mode == "payment" || session.mode == "subscription" else {
            return Rejection(.storeRejected, "a Checkout Session in mode '\(session.mode?.prefix(40) ?? "none")' sells nothing")
        }
        switch (session.status, session.paymentStatus) {
        case ("complete"?, "paid"?), ("complete"?, "no_payment_required"?):
            return nil
        case ("complete"?, "unpaid"?):
            if let intent = session.paymentIntentStatus, ["requires_payment_method", "canceled"].contains(intent) {
                return Rejection(.purchaseNotCompleted, "the delayed payment failed (payment intent \(intent))")
            }
            return Rejection(.purchasePending, retryable: true, "the payment settles later; it is asked about again until it does")
        case ("open"?, _):
            return Rejection(.purchaseNotCompleted, "the customer has not completed the checkout")
        case ("expired"?, _):
            return Rejection(.purchaseNotCompleted, "the checkout expired unpaid")
        case (let status, let payment):
            return Rejection(.storeRejected, "a Checkout Session \(status?.prefix(40) ?? "without status"), payment \(payment?.prefix(40) ?? "without status")")
        }
    }

    /// Why the session is not `user`'s; nil when it is.
    func userRejection(_ session: StripeCheckoutSession, _ user: UserID) -> Rejection? {
        guard let named = namedUser(clientReferenceId: session.clientReferenceId, metadata: session.metadata) else {
            return Rejection(.wrongUser, "the session names no user (client_reference_id, metadata \(configuration.userMetadataKey))")
        }
        // Compared as bytes: another Unicode spelling of the same text is another user.
        return named == user ? nil : Rejection(.wrongUser, "the session was made for another user")
    }

    /// The user a Checkout Session was made for: its `client_reference_id`, else its metadata's `userMetadataKey`; nil
    /// when it names none.
    public func namedUser(clientReferenceId: String?, metadata: [String: String]) -> UserID? {
        let named = clientReferenceId.flatMap { $0.isEmpty ? nil : $0 } ?? metadata[configuration.userMetadataKey]
        return named.flatMap { $0.isEmpty ? nil : UserID($0) }
    }

    /// The session's line items as purchases of one of the deployment's apps.
    func lineItems(_ session: StripeCheckoutSession) -> Result<StripeVerifiedCheckout, Rejection> {
        guard !session.lineItems.isEmpty else { return .failure(Rejection(.noPurchases, "the session lists no line item")) }
        var app: AppID?
        var ids: Set<StripeIDKey> = []
        for (index, item) in session.lineItems.enumerated() {
            let which = "line item \(index + 1) of \(session.lineItems.count)"
            guard ids.insert(StripeIDKey(item.id)).inserted else { return .failure(Rejection(.malformedPayload, "\(which) repeats the id of another")) }
            guard let price = item.priceId, !price.isEmpty else { return .failure(Rejection(.malformedPayload, "\(which) has no price")) }
            if let quantity = item.quantity, quantity < 1 { return .failure(Rejection(.malformedPayload, "\(which) has quantity \(quantity)")) }
            if configuration.productIdentity == .product, item.productId?.isEmpty ?? true {
                return .failure(Rejection(.malformedPayload, "\(which) names no product"))
            }
            let found = appOfId[StripeIDKey(price)] ?? item.productId.flatMap { appOfId[StripeIDKey($0)] }
            guard let found else { return .failure(Rejection(.wrongPackage, "\(which): price '\(price.prefix(80))' is sold by none of the deployment's apps")) }
            guard app == nil || app == found else { return .failure(Rejection(.wrongPackage, "the line items are of two apps, '\(app!)' and '\(found)'")) }
            app = found
            let verified = StripeVerifiedCheckout.transactionId(session: session.id, lineItem: item.id)
            if let unfit = Rejection.unfitId(["transaction id": (verified.rawValue, IdentifierLimits.transaction),
                                              "product id": (productId(of: item).rawValue, IdentifierLimits.product)], of: which) {
                return .failure(unfit)
            }
        }
        guard let app else { return .failure(Rejection(.noPurchases, "the session lists no line item")) }
        return .success(StripeVerifiedCheckout(session: session, app: app, productIds: session.lineItems.map(productId(of:))))
    }

    func productId(of item: StripeLineItem) -> ProductID {
        ProductID(configuration.productIdentity == .product ? item.productId ?? "" : item.priceId ?? "")
    }
}

/// A Stripe id compared and hashed by its bytes (`Identifier`), as every id from outside is.
typealias StripeIDKey = Identifier<StripeVerifier>

/// A verified Checkout Session: the app it sold for, and its line items as the pipeline's purchases.
public struct StripeVerifiedCheckout: Sendable, Hashable {
    public var session: StripeCheckoutSession
    public var app: AppID
    /// Each line item's product id, in the session's order (`StripeVerifier.ProductIdentity`).
    public var productIds: [ProductID]

    /// The transaction id of a session's line item: `{session}.{line item}`, the same every time it is read (neither id
    /// holds a '.').
    public static func transactionId(session: String, lineItem: String) -> TransactionID { TransactionID(session + "." + lineItem) }

    /// One purchase per line item, recorded as purchases of `store` (the Stripe case of `Store`): its quantity, its price
    /// or product as the product, the line's total (in milliunits) and currency; a subscription session's line items share
    /// the subscription as their original transaction and end with its current period.
    public func purchases(store: Store) -> [VerifiedPurchase] {
        zip(session.lineItems, productIds).map { VerifiedPurchase(item: $0, productId: $1, of: session, store: store) }
    }
}

extension VerifiedPurchase {
    /// A line item of a verified Checkout Session, recorded as a purchase of `store`. Its `raw` is the session's fields
    /// (expanded objects as their ids) with the line item's under `line_item`. A live-mode session is recorded in the
    /// environment `Production`, a test-mode one in `Test`.
    public init(item: StripeLineItem, productId: ProductID, of session: StripeCheckoutSession, store: Store) {
        self.store = store
        transactionId = StripeVerifiedCheckout.transactionId(session: session.id, lineItem: item.id)
        originalTransactionId = session.mode == "subscription" ? session.subscriptionId.map { TransactionID($0) } ?? transactionId : transactionId
        self.productId = productId
        productType = nil
        quantity = Int(clamping: item.quantity ?? 1)
        purchaseDate = session.created
        environment = session.livemode ? "Production" : "Test"
        currency = (item.currency ?? session.currency).flatMap(StripeValues.currencyCode)
        if let currency, let amount = item.amountTotal { price = StripeValues.milliunits(amount, currency: currency) }
        expiresDate = session.mode == "subscription" ? session.currentPeriodEnd : nil
        var raw = session.raw
        raw["line_item"] = .object(item.raw)
        self.raw = raw
    }
}

import Foundation
import PurchaseDomain
import StoreFixtures

/// Stripe as the harness plays it: the API in the harness's process (Checkout Sessions, charges, events), its secret key,
/// and the secret its webhooks are signed with.
public struct StandInStripe: Sendable {
    public let api: StripeAPIStandIn
    public let webhooks: StripeWebhookSigner

    public init() throws {
        api = try StripeAPIStandIn(configuration: .init(maxConnections: 512))
        webhooks = StripeWebhookSigner(secrets: ["whsec_" + StripeAPIStandIn.newID("harness")])
    }

    /// The Checkout Session, its one line item and payment intent of the harness's purchase `id`.
    public static func names(of id: String) -> (session: String, lineItem: String, paymentIntent: String) {
        ("cs_test_\(id)", "li_\(id)", "pi_\(id)")
    }

    /// The transaction id the pipeline records the line item of `names(of: id)` under (`{session}.{line item}`).
    public static func transactionId(of id: String) -> TransactionID {
        let names = names(of: id)
        return TransactionID(names.session + "." + names.lineItem)
    }

    /// Makes the paid Checkout Session of purchase `id` known to the API: `user`'s, of one `price`, bought at `created`.
    public func sell(_ id: String, price: ProductID, to user: UserID, at created: Date) {
        let names = Self.names(of: id)
        api.set(.init(id: names.session, clientReferenceId: user.rawValue,
                      lineItems: [.init(id: names.lineItem, priceId: price.rawValue, productId: "prod_\(price.rawValue)", unitAmount: 499)],
                      paymentIntentId: names.paymentIntent, created: created))
    }

    /// The workers' settings for it (`--stripe-api-url`, `--stripe-secret-key`, and the ingest's
    /// `--stripe-webhook-secrets`), its files written in `directory`.
    public func environment(in directory: URL) throws -> [String: String] {
        let key = directory.appendingPathComponent("stripe-secret-key")
        try Data((api.secretKey + "\n").utf8).write(to: key)
        let secrets = directory.appendingPathComponent("stripe-webhook-secrets")
        try Data(webhooks.secrets.map { $0 + "\n" }.joined().utf8).write(to: secrets)
        return ["IAP_STRIPE_API_URL": api.baseURL.absoluteString, "IAP_STRIPE_SECRET_KEY_FILE": key.path, "IAP_STRIPE_WEBHOOK_SECRETS_FILE": secrets.path]
    }
}

import Foundation
import Metrics
import PurchaseDomain
import RequestSigning
import StoreVerification

extension Workers {
    /// How a worker reaches Stripe's API (the verifier reads back every web purchase's Checkout Session; the sweeper reads
    /// Stripe's events for reconciliation).
    static let stripeAPISettings = [
        Setting("--stripe-api-url", env: "IAP_STRIPE_API_URL", default: StripeAPIClient.Configuration.defaultBaseURL.absoluteString, help: "Stripe API base URL"),
        Setting("--stripe-secret-key", env: "IAP_STRIPE_SECRET_KEY_FILE",
                help: "the file holding the Stripe secret key (sk_live_…), or a restricted key (rk_…) that reads Checkout Sessions and Events; "
                    + "needed by the apps that sell on Stripe (a stripe section in --apps, or a stripe section in --catalog)"),
    ]

    /// The Stripe API client `stripeAPISettings` configure, its calls counted in `metrics`; nil without a secret key.
    static func stripeAPI(_ settings: Settings, metrics: MetricsRegistry?) throws -> StripeAPIClient? {
        guard let path = settings.string("--stripe-secret-key"), !path.isEmpty else { return nil }
        guard let contents = SharedSecret.read(file: path) else {
            throw SettingsError("--stripe-secret-key (IAP_STRIPE_SECRET_KEY_FILE): cannot read \(path)")
        }
        let key = String(decoding: contents, as: UTF8.self)
        guard !key.isEmpty, key.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw SettingsError("--stripe-secret-key (IAP_STRIPE_SECRET_KEY_FILE) \(path): the file holds no key (one line, sk_… or rk_…)")
        }
        guard let base = URL(string: try settings.required("--stripe-api-url")) else { throw SettingsError("--stripe-api-url is not a URL") }
        return StripeAPIClient(configuration: .init(baseURL: base, secretKey: key, observer: StoreAPIMetrics.observer(.stripe, metrics)))
    }

    /// The verifier of the web purchases of the deployment's apps that sell on Stripe (each app's prices, from its
    /// catalog); nil when none does.
    static func stripeVerifier(_ settings: Settings, apps: AppDirectory, metrics: MetricsRegistry?) throws -> StripeVerifier? {
        let prices = apps.apps.filter { !$0.stripePrices.isEmpty }
        guard !prices.isEmpty, let api = try stripeAPI(settings, metrics: metrics) else { return nil }
        do {
            return try StripeVerifier(configuration: .init(apps: Dictionary(uniqueKeysWithValues: prices.map { ($0.id, Set($0.stripePrices.map(\.rawValue))) })),
                                      api: api)
        } catch {
            throw SettingsError("--apps (IAP_APPS_FILE): \(error)")
        }
    }
}

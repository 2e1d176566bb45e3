import Crypto
import Foundation
import Metrics
import PurchaseDomain
import StoreVerification

extension Workers {
    /// How a worker reaches the Android Publisher API (the verifier asks it about every Google Play purchase; the finisher
    /// consumes and acknowledges through it).
    static let googlePlayAPISettings = [
        Setting("--googleplay-api-url", env: "IAP_GOOGLEPLAY_API_URL", default: AndroidPublisherClient.Configuration.defaultBaseURL.absoluteString,
                help: "Android Publisher API base URL"),
        Setting("--googleplay-service-account", env: "IAP_GOOGLEPLAY_SERVICE_ACCOUNT_FILE",
                help: "the JSON key file of the Google Cloud service account the Play Console granted access to the apps' orders; "
                    + "without it Google Play purchases are refused by the verifier and completed by the app on the device"),
    ]

    /// The verifier's Google Play settings: the API, and the apps it sells in.
    static let googlePlayVerifierSettings = googlePlayAPISettings + [
        Setting("--googleplay-app", env: "IAP_GOOGLEPLAY_APPS",
                help: "a Google Play app this deployment sells in: PACKAGE=FILE, the file holding the app's licensing public key (Play Console, "
                    + "Monetization setup; base64) (repeat or comma-separate); none: Google Play purchases are refused", isList: true),
    ]

    /// The Android Publisher API client `googlePlayAPISettings` configure, its calls and its service account's counted in
    /// `metrics` (`StoreAPIMetrics`); nil without a service account.
    static func googlePlayAPI(_ settings: Settings, metrics: MetricsRegistry) throws -> AndroidPublisherClient? {
        guard let path = settings.string("--googleplay-service-account"), !path.isEmpty else { return nil }
        guard let keyFile = FileManager.default.contents(atPath: path) else {
            throw SettingsError("--googleplay-service-account (IAP_GOOGLEPLAY_SERVICE_ACCOUNT_FILE): cannot read \(path)")
        }
        let observer = StoreAPIMetrics.observer(.googleplay, metrics)
        let account: GoogleServiceAccount
        do { account = try GoogleServiceAccount(keyFile: keyFile, observer: observer) } catch {
            throw SettingsError("--googleplay-service-account (IAP_GOOGLEPLAY_SERVICE_ACCOUNT_FILE) \(path): \(error)")
        }
        guard let base = URL(string: try settings.required("--googleplay-api-url")) else { throw SettingsError("--googleplay-api-url is not a URL") }
        return AndroidPublisherClient(configuration: .init(baseURL: base, observer: observer), serviceAccount: account)
    }

    /// The verifier of Google Play purchases of the deployment's apps; nil when none sells there. Every purchase is asked
    /// of the API, so apps without a service account are a setting error.
    static func googlePlayVerifier(_ settings: Settings, apps: ConfiguredApps, metrics: MetricsRegistry) throws -> GooglePlayVerifier? {
        guard !apps.googlePlayKeys.isEmpty else { return nil }
        guard let api = try googlePlayAPI(settings, metrics: metrics) else {
            throw SettingsError("Google Play apps (--googleplay-app, or googleplay in --apps) need --googleplay-service-account "
                                + "(IAP_GOOGLEPLAY_SERVICE_ACCOUNT_FILE): every Google Play purchase is confirmed with the Android Publisher API")
        }
        return GooglePlayVerifier(configuration: .init(apps: apps.googlePlayKeys), api: api)
    }
}

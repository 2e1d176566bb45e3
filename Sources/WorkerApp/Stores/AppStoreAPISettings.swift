import Crypto
import Foundation
import JSONSchema
import Metrics
import PurchaseDomain
import PurchaseEvents
import StoreVerification

extension Workers {
    /// Each App Store app's API clients, from `appStoreAPISettings`: one In-App Purchase key (it serves every app of its
    /// team), each app's tokens naming its bundle id (`--bundle-id`, or each App Store app of `--apps`), and the sandbox's
    /// clients beside them with `--appstore-sandbox-api-url`. Nil without `--appstore-api-url`. Their calls are counted in
    /// `metrics` (`StoreAPIMetrics`) when given.
    static func appStoreAPIClients(_ settings: Settings, schemas: JSONSchemaRegistry, metrics: MetricsRegistry?) throws -> PerApp<AppStoreAPIClients>? {
        guard let url = settings.string("--appstore-api-url") else {
            guard settings.string("--appstore-sandbox-api-url") == nil else {
                throw SettingsError("--appstore-sandbox-api-url (IAP_APPSTORE_SANDBOX_API_URL) goes with --appstore-api-url (IAP_APPSTORE_API_URL)")
            }
            return nil
        }
        guard let base = URL(string: url) else { throw SettingsError("--appstore-api-url is not a URL") }
        let sandboxBase = try settings.string("--appstore-sandbox-api-url").map { text -> URL in
            guard let url = URL(string: text) else { throw SettingsError("--appstore-sandbox-api-url is not a URL") }
            return url
        }
        let bundleIds: PerApp<BundleID>
        if let file = try appsFile(settings, schemas: schemas) {
            let sold = file.apps.compactMap { app in app.bundleId.map { (app.id, $0) } }
            guard !sold.isEmpty else {
                throw SettingsError("--appstore-api-url (IAP_APPSTORE_API_URL) asks about App Store apps, and --apps (IAP_APPS_FILE) has none (no appstore section)")
            }
            bundleIds = PerApp(primary: file.directory.primary.id, byApp: Dictionary(sold, uniquingKeysWith: { first, _ in first }))
        } else {
            bundleIds = PerApp(single: BundleID(try settings.required("--bundle-id")))
        }
        let keyPath = try settings.required("--appstore-private-key")
        guard let pem = FileManager.default.contents(atPath: keyPath) else { throw SettingsError("--appstore-private-key: cannot read \(keyPath)") }
        let key: PrivateKey
        do { key = try PrivateKey(pem: pem) } catch { throw SettingsError("--appstore-private-key (IAP_APPSTORE_PRIVATE_KEY_FILE): \(error)") }
        let (keyId, issuerId) = (try settings.required("--appstore-key-id"), try settings.required("--appstore-issuer-id"))
        let environment = AppStoreEnvironment(rawValue: settings.string("--environment") ?? AppStoreEnvironment.production.rawValue)
        let observer = StoreAPIMetrics.observer(.appstore, metrics)
        return bundleIds.mapValues { bundleId in
            func client(_ url: URL) -> AppStoreServerAPIClient {
                AppStoreServerAPIClient(configuration: .init(baseURL: url, keyId: keyId, issuerId: issuerId, bundleId: bundleId, privateKey: key, observer: observer))
            }
            return AppStoreAPIClients(api: client(base), sandbox: sandboxBase.map(client), environment: environment)
        }
    }

    /// The same clients by the environment each serves: `--environment`'s (Production or Sandbox, else an error saying
    /// what `purpose` needs), and the sandbox's beside a Production one; nil without `--appstore-api-url`.
    static func appStoreAPIsByEnvironment(_ settings: Settings, schemas: JSONSchemaRegistry, metrics: MetricsRegistry?,
                                          purpose: String) throws -> PerApp<[AppStoreEnvironment: AppStoreServerAPIClient]>? {
        guard let clients = try appStoreAPIClients(settings, schemas: schemas, metrics: metrics) else { return nil }
        let environment = AppStoreEnvironment(rawValue: try settings.required("--environment"))
        guard environment == .production || environment == .sandbox else {
            throw SettingsError("--environment (IAP_ENVIRONMENT) must be Production or Sandbox \(purpose), not \(environment)")
        }
        return clients.mapValues(\.byEnvironment)
    }
}

import Crypto
import Foundation
import JSONSchema
import PurchaseDomain
import PurchaseEvents
import StoreVerification

extension Workers {
    /// The apps file, in place of the single-app settings.
    static let appsSetting = Setting("--apps", env: "IAP_APPS_FILE",
                                     help: "the apps file (JSON, schemas/apps.v1): each app of the deployment with its bundle id, packages, keys and catalog; "
                                         + "in place of --bundle-id, --app-apple-id, --appcoins-app, --googleplay-app and --catalog")

    /// The settings that describe a single app, which an apps file replaces.
    static let singleAppSettings = [("--bundle-id", "IAP_BUNDLE_ID"), ("--app-apple-id", "IAP_APP_APPLE_ID"), ("--appcoins-app", "IAP_APPCOINS_APPS"),
                                    ("--googleplay-app", "IAP_GOOGLEPLAY_APPS"), ("--catalog", "IAP_CATALOG")]

    /// The deployment's apps with what verifying their purchases needs.
    struct ConfiguredApps: Sendable {
        let directory: AppDirectory
        /// Every app's App Store identity.
        let appStore: [AppStoreApp]
        let appCoinsKeys: [PackageName: PublicKey]
        let googlePlayKeys: [PackageName: PublicKey]
    }

    /// The apps of `--apps`, else the one app the single-app settings describe (whichever of them this worker has).
    static func configuredApps(_ env: WorkerApp.Environment) throws -> ConfiguredApps {
        let settings = env.settings
        guard let file = try appsFile(settings, schemas: env.schemas) else { return try singleApp(env) }
        let path = settings.string("--apps") ?? ""
        var appCoins: [PackageName: PublicKey] = [:]
        var googlePlay: [PackageName: PublicKey] = [:]
        for (index, app) in file.apps.enumerated() {
            do {
                if let android = app.appCoins { appCoins[android.package] = try AndroidPurchaseData.publicKey(atPath: android.publicKeyFile.path) }
                if let android = app.googlePlay { googlePlay[android.package] = try AndroidPurchaseData.publicKey(atPath: android.publicKeyFile.path) }
            } catch {
                throw SettingsError("--apps (IAP_APPS_FILE) \(path): apps[\(index)] ('\(app.id)'): \(error)")
            }
        }
        return ConfiguredApps(directory: file.directory,
                              appStore: file.apps.compactMap { app in app.bundleId.map { AppStoreApp(bundleId: $0, appAppleId: app.appAppleId) } },
                              appCoinsKeys: appCoins, googlePlayKeys: googlePlay)
    }

    /// The apps file `--apps` names, read and checked; nil without it. An apps file beside a single-app setting is refused.
    static func appsFile(_ settings: Settings, schemas: JSONSchemaRegistry) throws -> AppsFile? {
        guard let path = settings.string("--apps"), !path.isEmpty else { return nil }
        for (flag, variable) in singleAppSettings where !settings.list(flag).allSatisfy(\.isEmpty) {
            throw SettingsError("--apps (IAP_APPS_FILE) and \(flag) (\(variable)) are both given: name the app's \(flag.dropFirst(2)) in the apps file")
        }
        do { return try AppsFile(contentsOf: URL(fileURLWithPath: path), schemas: schemas) } catch {
            throw SettingsError("--apps (IAP_APPS_FILE) \(path): \(error)")
        }
    }

    /// The app of the single-app settings: `--bundle-id` with `--app-apple-id`, the `--appcoins-app` and `--googleplay-app`
    /// packages, `--catalog` (whose `stripe` section, if any, are its web prices).
    private static func singleApp(_ env: WorkerApp.Environment) throws -> ConfiguredApps {
        let settings = env.settings
        let appAppleId = try settings.string("--app-apple-id").map { text -> Int64 in
            guard let id = Int64(text) else { throw SettingsError("--app-apple-id (IAP_APP_APPLE_ID) must be a number") }
            return id
        }
        let bundleId = settings.string("--bundle-id").flatMap { $0.isEmpty ? nil : BundleID($0) }
        let appCoins = try appCoinsApps(settings.list("--appcoins-app")) ?? [:]
        let googlePlay: [PackageName: PublicKey]
        do { googlePlay = try AndroidPurchaseData.apps(fromEntries: settings.list("--googleplay-app")) } catch {
            throw SettingsError("--googleplay-app (IAP_GOOGLEPLAY_APPS): \(error)")
        }
        let products = try settings.string("--catalog").map { try catalog(at: $0, env) }
        // A catalog with a stripe section sells those prices on the web.
        let app = AppDirectory.App(id: AppDirectory.unnamedAppID, bundleIds: bundleId.map { [$0] } ?? [], appCoinsPackages: appCoins.keys.sorted(),
                                   googlePlayPackages: googlePlay.keys.sorted(), stripePrices: products?.stripePrices ?? [], catalog: products)
        return ConfiguredApps(directory: AppDirectory(unnamed: app), appStore: bundleId.map { [AppStoreApp(bundleId: $0, appAppleId: appAppleId)] } ?? [],
                              appCoinsKeys: appCoins, googlePlayKeys: googlePlay)
    }
}

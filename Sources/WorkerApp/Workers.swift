import Crypto
import Foundation
import PurchaseDomain
import JSON
import JSONSchema
import Kafka
import PurchaseEvents
import Stages
import StoreVerification
import WorkerRuntime

/// The four workers' own settings and wiring; each executable's `main.swift` calls one of these.
public enum Workers {
    /// What the App Store's signed data is checked against: the app's Apple id and the roots its chains must reach.
    static let appStoreTrustSettings = [
        Setting("--app-apple-id", env: "IAP_APP_APPLE_ID", help: "the app's Apple id (required for Production)"),
        Setting("--root", env: "IAP_ROOT_CERTIFICATES",
                help: "root certificate file signed data (JWS) must chain to (repeat or comma-separate); Apple Root CA - G3 in production", isList: true),
    ]

    /// The verifier of the App Store's signed data of the deployment's apps in `environment`, from `appStoreTrustSettings`.
    static func signedDataVerifier(_ env: WorkerApp.Environment, apps: ConfiguredApps, environment: AppStoreEnvironment, onlineChecks: Bool = false,
                                   allowsUnsignedTestData: Bool = false) throws -> SignedDataVerifier {
        guard !apps.appStore.isEmpty else {
            throw SettingsError("no app sells on the App Store: give --bundle-id (IAP_BUNDLE_ID), or an appstore section in --apps (IAP_APPS_FILE)")
        }
        let roots = try WorkerApp.certificates(env.settings.list("--root"), setting: "--root (IAP_ROOT_CERTIFICATES)")
        do {
            return try SignedDataVerifier(configuration: .init(trustedRoots: roots, apps: apps.appStore, environment: environment, onlineChecks: onlineChecks,
                                                               allowsUnsignedTestData: allowsUnsignedTestData))
        } catch let error as VerifierConfigurationError where error.description.hasPrefix("appAppleId") {
            throw SettingsError("--app-apple-id (IAP_APP_APPLE_ID), or appAppleId in --apps (IAP_APPS_FILE): \(error)")
        }
    }

    /// The verifier's own settings.
    public static let verifierSettings = [
        appsSetting,
        Setting("--bundle-id", env: "IAP_BUNDLE_ID", help: "the app's bundle id (required without --apps)"),
        Setting("--environment", env: "IAP_ENVIRONMENT", default: "Production", help: "Production, Sandbox, Xcode or LocalTesting"),
    ] + appStoreTrustSettings + [
        Setting("--receipt-root", env: "IAP_RECEIPT_ROOT_CERTIFICATES",
                help: "root certificate file StoreKit 1 app receipts must chain to (repeat or comma-separate); Apple Inc. Root in production; none: every receipt is rejected",
                isList: true),
        Setting("--allow-unsigned-test-data", env: "IAP_ALLOW_UNSIGNED_TEST_DATA", default: "false",
                help: "accept Xcode and LocalTesting data without a signature: required by those environments, refused by the others; never in a deployment",
                isSwitch: true),
        Setting("--online-checks", env: "IAP_ONLINE_CHECKS", default: "false", help: "check validity now and ask OCSP responders", isSwitch: true),
        Setting("--accept-sandbox", env: "IAP_ACCEPT_SANDBOX", default: "false",
                help: "Production only: also accept purchases signed for the Sandbox (App Review buys there), recorded and announced with environment Sandbox",
                isSwitch: true),
        Setting("--appcoins-url", env: "IAP_APPCOINS_URL", default: AppCoinsVerifier.Configuration.defaultBaseURL.absoluteString, help: "AppCoins API base URL"),
        Setting("--appcoins-app", env: "IAP_APPCOINS_APPS",
                help: "an AppCoins app this deployment sells in: PACKAGE=FILE, the file holding the app's public key from the Catappult back office "
                    + "(repeat or comma-separate); none: AppCoins purchases are refused", isList: true),
    ] + googlePlayVerifierSettings + stripeAPISettings + [
        Setting("--catalog", env: "IAP_CATALOG", help: "the product catalog file: names the product type where the store does not (receipts, AppCoins, Google Play, Stripe)"),
        Setting("--restore-policy", env: "IAP_RESTORE_POLICY", default: RestorePolicy.transfer.rawValue,
                help: "an entitlement restored under another user id: transfer (moves to that user) or keep (stays with the first)"),
        Setting("--pending-recheck", env: "IAP_PENDING_RECHECK", default: "60", help: "seconds before a pending AppCoins or Google Play payment is asked about again"),
        Setting("--require-account-token", env: "IAP_REQUIRE_ACCOUNT_TOKEN", default: "false",
                help: "refuse a submission that names no appAccountToken for a transaction bound to one (apps whose backends always name it)",
                isSwitch: true),
    ]

    public static func verifier() async -> Int32 {
        await WorkerApp.main(command: "iap-verifier", summary: "Verifies purchase.submitted and store.notification events.", settings: verifierSettings) { env in
            [try env.runner(for: try verifierStage(env))]
        }
    }

    /// The verifier's stage from its settings.
    public static func verifierStage(_ env: WorkerApp.Environment) throws -> VerifierStage {
        let environment = AppStoreEnvironment(rawValue: try env.settings.required("--environment"))
        guard AppStoreEnvironment.configurable.contains(environment) else {
            throw SettingsError("--environment (IAP_ENVIRONMENT) must be Production, Sandbox, Xcode or LocalTesting")
        }
        // A second key: the environment's name alone must never turn signature checks off.
        let allowUnsigned = env.settings.flag("--allow-unsigned-test-data")
        switch environment.unsignedTestDataProblem(allowed: allowUnsigned) {
        case nil: break
        case .permissionMissing?:
            throw SettingsError("--environment (IAP_ENVIRONMENT) \(environment) accepts data nobody signed, so it needs "
                                + "--allow-unsigned-test-data (IAP_ALLOW_UNSIGNED_TEST_DATA) too; never in a deployment")
        case .permissionMisplaced?:
            throw SettingsError("--allow-unsigned-test-data (IAP_ALLOW_UNSIGNED_TEST_DATA) is only for --environment Xcode or LocalTesting, not \(environment)")
        }
        let receiptRoots = try WorkerApp.certificates(env.settings.list("--receipt-root"), setting: "--receipt-root (IAP_RECEIPT_ROOT_CERTIFICATES)")
        let apps = try configuredApps(env)
        try requireSomeStore(apps.directory)
        if receiptRoots.isEmpty && !allowUnsigned && !apps.appStore.isEmpty {
            env.logger.info("no --receipt-root (IAP_RECEIPT_ROOT_CERTIFICATES): every StoreKit 1 app receipt is rejected")
        }
        // Google does not say whether a product is consumed or acknowledged, nor a one-time product from a subscription: the
        // catalog does. Without it a consumable would be acknowledged, and could not be bought again.
        if let app = apps.directory.apps.first(where: { !$0.googlePlayPackages.isEmpty && $0.catalog == nil }) {
            throw SettingsError(apps.directory.namesApps
                ? "--apps (IAP_APPS_FILE): the app '\(app.id)' sells on Google Play and has no catalog: it names each product's type"
                : "--googleplay-app (IAP_GOOGLEPLAY_APPS) needs --catalog (IAP_CATALOG): it names each Google Play product's type")
        }
        let online = env.settings.flag("--online-checks")
        let acceptsSandbox = env.settings.flag("--accept-sandbox")
        guard !acceptsSandbox || environment == .production else {
            throw SettingsError("--accept-sandbox (IAP_ACCEPT_SANDBOX) is only for --environment Production, not \(environment)")
        }
        let sandboxApp = apps.directory.apps.first { $0.acceptsSandbox == true }
        if let app = sandboxApp, environment != .production {
            throw SettingsError("--apps (IAP_APPS_FILE): the app '\(app.id)' accepts Sandbox purchases, which is only for --environment Production, not \(environment)")
        }
        let someAcceptSandbox = acceptsSandbox || sandboxApp != nil
        guard let appCoinsURL = URL(string: try env.settings.required("--appcoins-url")) else { throw SettingsError("--appcoins-url is not a URL") }
        guard let pendingRecheck = try env.settings.seconds("--pending-recheck"), pendingRecheck > 0 else {
            throw SettingsError("--pending-recheck (IAP_PENDING_RECHECK) must be positive")
        }
        guard let restorePolicy = RestorePolicy(rawValue: try env.settings.required("--restore-policy")) else {
            throw SettingsError("--restore-policy (IAP_RESTORE_POLICY) must be transfer or keep")
        }
        // After the settings of the worker as a whole: what each app's stores need of it.
        let hasServiceAccount = !(env.settings.string("--googleplay-service-account") ?? "").isEmpty
        try requireWhatTheStoresNeed(apps.directory, worker: "iap-verifier") { _, store in
            switch store {
            case .appstore:
                env.settings.list("--root").allSatisfy(\.isEmpty) && !allowUnsigned
                    ? ["--root (IAP_ROOT_CERTIFICATES): the root its signed data must chain to (Apple Root CA - G3)"] : []
            case .googleplay:
                hasServiceAccount ? [] : ["--googleplay-service-account (IAP_GOOGLEPLAY_SERVICE_ACCOUNT_FILE): every Google Play purchase is confirmed with the Android Publisher API"]
            case .appcoins: [] // its key is in the app's entry; its API needs no account
            case .stripe:
                (env.settings.string("--stripe-secret-key") ?? "").isEmpty
                    ? ["--stripe-secret-key (IAP_STRIPE_SECRET_KEY_FILE): every web purchase's Checkout Session is read back from Stripe's API"] : []
            }
        }
        // One environment's verifiers; the sandbox's beside production's are the same but for it (unsigned test data is
        // refused in both, above).
        func verifiers(_ environment: AppStoreEnvironment) throws -> (signedData: SignedDataVerifier, receipts: ReceiptVerifier) {
            (try signedDataVerifier(env, apps: apps, environment: environment, onlineChecks: online, allowsUnsignedTestData: allowUnsigned),
             try ReceiptVerifier(configuration: .init(trustedRoots: receiptRoots, bundleIds: apps.appStore.map(\.bundleId), environment: environment,
                                                      onlineChecks: online, allowsUnsignedTestData: allowUnsigned)))
        }
        // A deployment that sells nowhere on the App Store has no App Store verifiers, and refuses what claims to be from it.
        var appStore: AppStoreVerifiers?
        if !apps.appStore.isEmpty {
            let production = try verifiers(environment)
            appStore = AppStoreVerifiers(signedData: production.signedData, receipts: production.receipts,
                                         sandbox: someAcceptSandbox ? try verifiers(.sandbox) : nil, sandboxByDefault: acceptsSandbox)
        }
        let stores = StoreVerifiers(
            appStore: appStore,
            appCoins: apps.appCoinsKeys.isEmpty ? nil : AppCoinsVerifier(configuration: .init(baseURL: appCoinsURL, apps: apps.appCoinsKeys,
                                                                                              observer: StoreAPIMetrics.observer(.appcoins, env.metrics))),
            googlePlay: try googlePlayVerifier(env.settings, apps: apps, metrics: env.metrics),
            stripe: try stripeVerifier(env.settings, apps: apps.directory, metrics: env.metrics))
        return VerifierStage(
            context: env.context(stage: "verifier"), store: env.store, stores: stores,
            apps: apps.directory, restorePolicy: restorePolicy,
            requireAccountToken: env.settings.flag("--require-account-token"), pendingRecheck: .milliseconds(Int64(pendingRecheck * 1000)))
    }

    /// Whether a purchase flagged due is undone: the granter reverses its grants, and the sweeper refunds a Google Play
    /// one's order through the API before its `refund.due` goes out. Give both workers the same value.
    static let clawBackSetting = Setting("--claw-back-due-refunds", env: "IAP_CLAW_BACK_DUE_REFUNDS", default: "false",
                                         help: "reverse the grants of purchases flagged refund.due (granter); refund Google Play ones through the API first (sweeper)",
                                         isSwitch: true)

    /// The granter's own settings.
    public static let granterSettings = [
        appsSetting,
        Setting("--catalog", env: "IAP_CATALOG", help: "the product catalog file (JSON, schemas/catalog.v1) (required without --apps)"),
        clawBackSetting,
        Setting("--adjustments-take-what-is-left", env: "IAP_ADJUSTMENTS_TAKE_WHAT_IS_LEFT", default: "false",
                help: "a user.adjustment that takes more of a currency than the user has takes what is left and records the shortfall, "
                    + "instead of being refused (insufficientBalance)", isSwitch: true),
    ]

    public static func granter() async -> Int32 {
        await WorkerApp.main(command: "iap-granter", summary: "Grants verified purchases; reverses revoked ones; applies operators' adjustments.",
                             settings: granterSettings) { env in
            [try env.runner(for: try await granterStage(env))]
        }
    }

    /// The granter's stage from its settings; names the product types of purchases recorded before types were kept.
    public static func granterStage(_ env: WorkerApp.Environment) async throws -> GranterStage {
        let apps = try configuredApps(env).directory
        if let app = apps.apps.first(where: { $0.catalog == nil }) {
            throw SettingsError(apps.namesApps ? "--apps (IAP_APPS_FILE): the app '\(app.id)' has no catalog: the granter grants by it"
                                               : "--catalog (IAP_CATALOG) is required")
        }
        // Purchases recorded before product types were kept get theirs from the primary app's catalog (they were recorded
        // before apps were named; until they are typed, they are `unknown`: never flagged).
        if let catalog = apps.primary.catalog {
            for store in Store.allCases {
                let named = try await env.store.assignProductTypes(catalog.types(of: store), store: store)
                if named > 0 { env.logger.info("named product types from the catalog", ["store": store.rawValue, "purchases": named]) }
            }
        }
        return GranterStage(context: env.context(stage: "granter"), store: env.store, apps: apps,
                            clawBackDueRefunds: env.settings.flag("--claw-back-due-refunds"),
                            adjustmentsTakeWhatIsLeft: env.settings.flag("--adjustments-take-what-is-left"))
    }

    static func catalog(at path: String, _ env: WorkerApp.Environment) throws -> ProductCatalog {
        do { return try ProductCatalog(contentsOf: URL(fileURLWithPath: path), schemas: env.schemas) } catch let error as CatalogError {
            throw SettingsError("--catalog (IAP_CATALOG) \(path): \(error)")
        } catch {
            throw SettingsError("--catalog (IAP_CATALOG): cannot read \(path): \(error)")
        }
    }

    /// How a worker reaches the App Store Server API (the finisher, the sweeper's reconciliation).
    static let appStoreAPISettings = [
        appsSetting,
        Setting("--bundle-id", env: "IAP_BUNDLE_ID", help: "the app's bundle id (for API tokens; or its App Store app in --apps)"),
        Setting("--appstore-api-url", env: "IAP_APPSTORE_API_URL",
                help: "App Store Server API base URL; without it App Store purchases finish when the app reports them consumed, and nothing is reconciled"),
        Setting("--appstore-sandbox-api-url", env: "IAP_APPSTORE_SANDBOX_API_URL",
                help: "the sandbox's App Store Server API base URL, beside --appstore-api-url, for a production deployment whose verifier accepts "
                    + "sandbox purchases (--accept-sandbox): purchases verified in the Sandbox are finished, answered and reconciled there"),
        Setting("--appstore-key-id", env: "IAP_APPSTORE_KEY_ID", help: "In-App Purchase key id"),
        Setting("--appstore-issuer-id", env: "IAP_APPSTORE_ISSUER_ID", help: "App Store Connect issuer id"),
        Setting("--appstore-private-key", env: "IAP_APPSTORE_PRIVATE_KEY_FILE", help: "the In-App Purchase key (.p8 PEM file)"),
    ]

    /// The finisher's own settings.
    public static let finisherSettings = appStoreAPISettings + googlePlayAPISettings + [
        Setting("--sample-content-provided", env: "IAP_SAMPLE_CONTENT_PROVIDED", default: "false",
                help: "answers to the App Store's consumption requests say the app gives a free sample or trial before purchase", isSwitch: true),
    ]

    public static func finisher() async -> Int32 {
        await WorkerApp.main(command: "iap-finisher", summary: "Finishes granted purchases with their store and answers its consumption requests.",
                             settings: finisherSettings) { env in
            [try env.runner(for: try finisherStage(env))]
        }
    }

    /// The finisher's stage from its settings.
    public static func finisherStage(_ env: WorkerApp.Environment) throws -> FinisherStage {
        let appStoreAPIs = try appStoreAPIClients(env.settings, schemas: env.schemas, metrics: env.metrics)
        let googlePlay = try googlePlayAPI(env.settings, metrics: env.metrics)
        if let apps = try appsFile(env.settings, schemas: env.schemas)?.directory {
            try requireWhatTheStoresNeed(apps, worker: "iap-finisher") { _, store in
                switch store {
                case .googleplay:
                    googlePlay == nil ? ["--googleplay-service-account (IAP_GOOGLEPLAY_SERVICE_ACCOUNT_FILE): Google refunds a purchase not "
                                         + "acknowledged or consumed through the Android Publisher API within three days"] : []
                case .appstore, .appcoins, .stripe: [] // finished by the app's consumption report without an API
                }
            }
        }
        return FinisherStage(context: env.context(stage: "finisher"), store: env.store,
                             appStoreAPIs: appStoreAPIs, googlePlay: googlePlay,
                             sampleContentProvided: env.settings.flag("--sample-content-provided"))
    }

    /// The operator's AppCoins apps (`PACKAGE=FILE`), each with its public key; nil when none is configured.
    static func appCoinsApps(_ entries: [String]) throws -> [PackageName: PublicKey]? {
        let apps: [PackageName: PublicKey]
        do { apps = try AndroidPurchaseData.apps(fromEntries: entries) } catch { throw SettingsError("--appcoins-app (IAP_APPCOINS_APPS): \(error)") }
        return apps.isEmpty ? nil : apps
    }
}

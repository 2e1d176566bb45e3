import Crypto
import Foundation
import PurchaseStore
import StoreFixtures
import Testing
import TestSupport
import WorkerApp

/// `--apps` (`IAP_APPS_FILE`) as the workers read it: the stages are built from the file, and what is wrong stops the
/// worker with a message naming the setting and the app. No broker is reached.
@Suite struct AppsSettingsTests {
    let directory: URL
    let store: SQLPurchaseStore

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("apps-settings-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        store = try SQLPurchaseStore(url: "sqlite:" + directory.appendingPathComponent("store.sqlite").path)
    }

    static let twoApps = """
        {"apps": [
          {"id": "coins-game", "appstore": {"bundleId": "com.example.coins"},
           "catalog": {"appstore": {"pack.small": {"type": "consumable", "currency": "coins", "amount": 100}}}},
          {"id": "puzzle", "appstore": {"bundleId": "com.example.puzzle"} \\(PUZZLE_CATALOG)}
        ]}
        """

    /// The environment of a worker given `apps` as its apps file (locally signed test data: no roots needed).
    func variables(_ apps: String, _ extra: [String: String] = [:]) throws -> [String: String] {
        let file = directory.appendingPathComponent("apps.json")
        try Data(apps.utf8).write(to: file)
        return ["KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "IAP_APPS_FILE": file.path, "IAP_ENVIRONMENT": "Xcode", "IAP_ALLOW_UNSIGNED_TEST_DATA": "true"]
            .merging(extra) { _, new in new }
    }

    func apps(puzzleCatalog: Bool) -> String {
        Self.twoApps.replacingOccurrences(of: "\\(PUZZLE_CATALOG)", with: puzzleCatalog
            ? #", "catalog": {"appstore": {"pack.small": {"type": "consumable", "currency": "hints", "amount": 5}}}"# : "")
    }

    func refusal(_ build: () async throws -> Void) async -> String {
        do { try await build(); return "built" } catch { return "\(error)" }
    }

    @Test func theVerifierAndGranterAreBuiltFromTheFile() async throws {
        let variables = try variables(apps(puzzleCatalog: true))
        let verifier = try WorkerApp.embedded(command: "iap-verifier", settings: Workers.verifierSettings, variables: variables, store: store)
        _ = try Workers.verifierStage(verifier)
        _ = try await store.migrate()
        let granter = try WorkerApp.embedded(command: "iap-granter", settings: Workers.granterSettings, variables: variables, store: store)
        _ = try await Workers.granterStage(granter)
    }

    /// `iap-webhooks`: an endpoint of some apps needs the apps file, and names apps it has; each endpoint is a stage of its own.
    @Test func webhookEndpointsOfSomeAppsNeedTheAppsFile() async throws {
        try Data("secret".utf8).write(to: directory.appendingPathComponent("hook.secret"))
        let webhooks = directory.appendingPathComponent("webhooks.json")
        func stages(apps: String, file: Bool) async throws -> String {
            try Data((#"{"endpoints": [{"name": "all", "url": "https://a.example/", "secretFile": "hook.secret"},"#
                      + #" {"name": "puzzle", "url": "https://p.example/", "secretFile": "hook.secret", "apps": [\#(apps)]}]}"#).utf8).write(to: webhooks)
            var environment = try variables(Self.twoApps.replacingOccurrences(of: "\\(PUZZLE_CATALOG)", with: ""), ["IAP_WEBHOOKS_FILE": webhooks.path])
            if !file { environment["IAP_APPS_FILE"] = nil }
            let env = try WorkerApp.embedded(command: "iap-webhooks", settings: Workers.webhooksSettings, variables: environment, store: store)
            return await refusal {
                let names = try Workers.webhookStages(env).map(\.name)
                #expect(names == ["webhook-all", "webhook-puzzle"])
            }
        }
        #expect(try await stages(apps: #""puzzle""#, file: true) == "built")
        #expect(try await stages(apps: #""puzzle""#, file: false).contains("endpoint 'puzzle' takes some apps' events: give the apps file (--apps, IAP_APPS_FILE)"))
        #expect(try await stages(apps: #""chess""#, file: true).contains("endpoint 'puzzle': the apps file has no app 'chess'"))
    }

    /// Plain http only where nothing crosses a network, or when the operator says the network is protected.
    @Test func webhookEndpointsTakePlainHTTPOnlyToThisMachineOrWhenAllowed() async throws {
        try Data("secret".utf8).write(to: directory.appendingPathComponent("hook.secret"))
        let webhooks = directory.appendingPathComponent("webhooks.json")
        func stages(_ url: String, allow: Bool = false) async throws -> String {
            try Data(#"{"endpoints": [{"name": "b", "url": "\#(url)", "secretFile": "hook.secret", "allowPlainHTTP": \#(allow)}]}"#.utf8).write(to: webhooks)
            let env = try WorkerApp.embedded(command: "iap-webhooks", settings: Workers.webhooksSettings,
                                             variables: ["KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "IAP_WEBHOOKS_FILE": webhooks.path], store: store)
            return await refusal { _ = try Workers.webhookStages(env) }
        }
        #expect(try await stages("http://backend.internal/h").contains("endpoint 'b': url is http to backend.internal: the events and their signature would cross the network in clear"))
        for url in ["http://127.0.0.1:8080/h", "http://localhost/h", "http://[::1]:9/h", "https://backend.internal/h"] {
            #expect(try await stages(url) == "built", "\(url)")
        }
        #expect(try await stages("http://backend.internal/h", allow: true) == "built")
    }

    @Test func theGranterNeedsEveryAppsCatalog() async throws {
        let variables = try variables(apps(puzzleCatalog: false))
        let granter = try WorkerApp.embedded(command: "iap-granter", settings: Workers.granterSettings, variables: variables, store: store)
        let message = await refusal { _ = try await Workers.granterStage(granter) }
        #expect(message.contains("--apps (IAP_APPS_FILE): the app 'puzzle' has no catalog"), "\(message)")
    }

    /// One currency spelled in two Unicode forms (`café` precomposed in one app's catalog, decomposed in another's, or
    /// both in one catalog file) would be two balances of what the operator reads as one: the workers refuse to start,
    /// naming the file and both spellings' bytes.
    @Test func oneItemCodeSpelledTwoWaysStopsTheWorkers() async throws {
        let (precomposed, decomposed) = ("caf\u{E9}", "cafe\u{301}")
        let hex = ["63 61 66 c3 a9", "63 61 66 65 cc 81"]
        func catalog(_ currency: String) -> String {
            #"{"appstore": {"pack": {"type": "consumable", "currency": "\#(currency)", "amount": 5}}}"#
        }
        let twoCatalogs = #"{"apps": [{"id": "coins-game", "appstore": {"bundleId": "com.example.coins"}, "catalog": \#(catalog(precomposed))},"#
            + #" {"id": "puzzle", "appstore": {"bundleId": "com.example.puzzle"}, "catalog": \#(catalog(decomposed))}]}"#
        let variables = try variables(twoCatalogs)
        let file = try #require(variables["IAP_APPS_FILE"])
        for (command, settings) in [("iap-granter", Workers.granterSettings), ("iap-verifier", Workers.verifierSettings)] {
            let env = try WorkerApp.embedded(command: command, settings: settings, variables: variables, store: store)
            let message = await refusal {
                if command == "iap-granter" { _ = try await Workers.granterStage(env) } else { _ = try Workers.verifierStage(env) }
            }
            #expect(message.contains("--apps (IAP_APPS_FILE) \(file)") && hex.allSatisfy(message.contains), "\(command): \(message)")
            #expect(message.contains("apps[0].catalog ('coins-game') and apps[1].catalog ('puzzle')"), "\(message)")
        }
        // Spelled alike in both, the apps start.
        let alike = try WorkerApp.embedded(command: "iap-verifier", settings: Workers.verifierSettings,
                                           variables: try self.variables(twoCatalogs.replacingOccurrences(of: decomposed, with: precomposed)), store: store)
        _ = try Workers.verifierStage(alike)

        // Both spellings in one catalog file of an app: the catalog's file is named.
        let catalogFile = directory.appendingPathComponent("catalog.json")
        try Data((#"{"appstore": {"a": {"type": "consumable", "currency": "\#(precomposed)", "amount": 1},"#
                  + #" "b": {"type": "consumable", "currency": "\#(decomposed)", "amount": 2}}}"#).utf8).write(to: catalogFile)
        let oneFile = try WorkerApp.embedded(command: "iap-verifier", settings: Workers.verifierSettings,
                                             variables: try self.variables(#"{"apps": [{"id": "a", "appstore": {"bundleId": "com.example.a"}, "catalog": "catalog.json"}]}"#),
                                             store: store)
        let message = await refusal { _ = try Workers.verifierStage(oneFile) }
        #expect(message.contains(catalogFile.path) && hex.allSatisfy(message.contains), "\(message)")
    }

    /// Google does not say whether a product is consumed or acknowledged: an app on Google Play needs its catalog.
    @Test func aGooglePlayAppNeedsItsCatalog() async throws {
        try Data(try GooglePlaySigner().publicKeyBase64().utf8).write(to: directory.appendingPathComponent("play.pub"))
        let variables = try variables(#"{"apps": [{"id": "a", "googleplay": {"package": "com.example.a", "publicKeyFile": "play.pub"}}]}"#)
        let verifier = try WorkerApp.embedded(command: "iap-verifier", settings: Workers.verifierSettings, variables: variables, store: store)
        let message = await refusal { _ = try Workers.verifierStage(verifier) }
        #expect(message.contains("the app 'a' sells on Google Play and has no catalog"), "\(message)")
    }

    /// Any mix of stores: a game sold on Google Play alone, or on AppCoins alone, needs no App Store setting; what a
    /// store it sells in needs and the worker lacks is named by app and store, all at once.
    @Test func eachWorkerStartsWithTheStoresItsAppsSellIn() async throws {
        try Data(try GooglePlaySigner().publicKeyBase64().utf8).write(to: directory.appendingPathComponent("play.pub"))
        try Data(try AppCoinsSigner().publicKeyBase64().utf8).write(to: directory.appendingPathComponent("appcoins.pub"))
        try Data(try GooglePlayAPIStandIn(purchases: [:]).serviceAccountKeyJSON().utf8).write(to: directory.appendingPathComponent("account.json"))
        _ = try await store.migrate()
        let catalog = #""catalog": {"googleplay": {"coins.100": {"type": "consumable", "currency": "coins", "amount": 100}}}"#
        let android = #"{"apps": [{"id": "android-game", "googleplay": {"package": "com.example.a", "publicKeyFile": "play.pub"}, \#(catalog)},"#
            + #" {"id": "web-coins", "appcoins": {"package": "com.example.w", "publicKeyFile": "appcoins.pub"}, \#(catalog)}]}"#
        let production = ["IAP_ENVIRONMENT": "Production", "IAP_ALLOW_UNSIGNED_TEST_DATA": "false"]
        let account = ["IAP_GOOGLEPLAY_SERVICE_ACCOUNT_FILE": directory.appendingPathComponent("account.json").path]
        let complete = try variables(android, production.merging(account) { _, new in new })
        func environment(_ command: String, _ settings: [Setting], _ variables: [String: String]) throws -> WorkerApp.Environment {
            try WorkerApp.embedded(command: command, settings: settings, arguments: ["--kafka", "log_level=0"], variables: variables, store: store)
        }
        _ = try Workers.verifierStage(try environment("iap-verifier", Workers.verifierSettings, complete))
        _ = try await Workers.granterStage(try environment("iap-granter", Workers.granterSettings, complete))
        _ = try Workers.finisherStage(try environment("iap-finisher", Workers.finisherSettings, complete))
        let services = try Workers.sweeperServices(try environment("iap-sweeper", Workers.sweeperSettings, complete))
        #expect(services.reconciler != nil, "Google Play's voided purchases are reconciled")

        let lacking = try variables(android, production)
        let verifier = await refusal { _ = try Workers.verifierStage(try environment("iap-verifier", Workers.verifierSettings, lacking)) }
        #expect(verifier.contains("the app 'android-game' sells on Google Play: iap-verifier needs --googleplay-service-account"), "\(verifier)")
        let finisher = await refusal { _ = try Workers.finisherStage(try environment("iap-finisher", Workers.finisherSettings, lacking)) }
        #expect(finisher.contains("the app 'android-game' sells on Google Play: iap-finisher needs --googleplay-service-account"), "\(finisher)")
        #expect(!verifier.contains("web-coins") && !finisher.contains("App Store"), "AppCoins needs no account, the App Store is not sold in")

        // An App Store app without the roots its signed data must chain to is named too, beside the Android one.
        let mixed = #"{"apps": [{"id": "ios-game", "appstore": {"bundleId": "com.example.i", "appAppleId": 1}}, "#
            + #"{"id": "android-game", "googleplay": {"package": "com.example.a", "publicKeyFile": "play.pub"}, \#(catalog)}]}"#
        let both = await refusal { _ = try Workers.verifierStage(try environment("iap-verifier", Workers.verifierSettings, try variables(mixed, production))) }
        #expect(both.contains("the app 'ios-game' sells on the App Store: iap-verifier needs --root (IAP_ROOT_CERTIFICATES)")
                && both.contains("the app 'android-game' sells on Google Play: iap-verifier needs --googleplay-service-account"), "\(both)")

        // The single-app settings naming no store at all.
        let nothing = await refusal {
            _ = try Workers.verifierStage(try environment("iap-verifier", Workers.verifierSettings, ["KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"]))
        }
        #expect(nothing.contains("no store is configured"), "\(nothing)")
    }

    @Test func theFileAndTheSingleAppSettingsAreNotMixed() async throws {
        let variables = try variables(apps(puzzleCatalog: true), ["IAP_BUNDLE_ID": "com.example.coins"])
        let verifier = try WorkerApp.embedded(command: "iap-verifier", settings: Workers.verifierSettings, variables: variables, store: store)
        let message = await refusal { _ = try Workers.verifierStage(verifier) }
        #expect(message.contains("--apps (IAP_APPS_FILE) and --bundle-id (IAP_BUNDLE_ID) are both given"), "\(message)")
    }

    @Test func productionNeedsEveryAppsAppleId() async throws {
        let root = directory.appendingPathComponent("root.pem")
        try Data(try TestPKI.make().root.pemRepresentation.utf8).write(to: root)
        let variables = try variables(apps(puzzleCatalog: true), ["IAP_ENVIRONMENT": "Production", "IAP_ALLOW_UNSIGNED_TEST_DATA": "false",
                                                                  "IAP_ROOT_CERTIFICATES": root.path])
        let verifier = try WorkerApp.embedded(command: "iap-verifier", settings: Workers.verifierSettings, variables: variables, store: store)
        let message = await refusal { _ = try Workers.verifierStage(verifier) }
        #expect(message.contains("appAppleId") && message.contains("com.example.coins"), "\(message)")
    }

    @Test func aBadFileIsNamedWithItsField() async throws {
        let variables = try variables(#"{"apps": [{"id": "Coins", "appstore": {"bundleId": "com.example.coins"}}]}"#)
        let verifier = try WorkerApp.embedded(command: "iap-verifier", settings: Workers.verifierSettings, variables: variables, store: store)
        let message = await refusal { _ = try Workers.verifierStage(verifier) }
        #expect(message.contains("--apps (IAP_APPS_FILE)") && message.contains("/apps/0/id"), "\(message)")
    }

    /// The App Store Server API's tokens name one app: the finisher has a client for each App Store app of the file, and
    /// an apps file without one is refused with the API configured.
    @Test func theAppStoreServerAPIIsAskedPerApp() async throws {
        let key = directory.appendingPathComponent("key.p8")
        try Data(try PrivateKey.generateP256().pemRepresentation().utf8).write(to: key)
        let api = ["IAP_APPSTORE_API_URL": "http://127.0.0.1:1", "IAP_APPSTORE_KEY_ID": "K", "IAP_APPSTORE_ISSUER_ID": "I",
                   "IAP_APPSTORE_PRIVATE_KEY_FILE": key.path]
        let finisher = try WorkerApp.embedded(command: "iap-finisher", settings: Workers.finisherSettings,
                                              variables: try variables(apps(puzzleCatalog: true), api), store: store)
        _ = try Workers.finisherStage(finisher)

        let keyFile = directory.appendingPathComponent("play.pub")
        try Data(try GooglePlaySigner().publicKeyBase64().utf8).write(to: keyFile)
        let androidOnly = #"{"apps": [{"id": "a", "googleplay": {"package": "com.example.a", "publicKeyFile": "play.pub"}}]}"#
        let refused = try WorkerApp.embedded(command: "iap-finisher", settings: Workers.finisherSettings, variables: try variables(androidOnly, api), store: store)
        let message = await refusal { _ = try Workers.finisherStage(refused) }
        #expect(message.contains("--apps (IAP_APPS_FILE) has none (no appstore section)"), "\(message)")
    }

    /// The sweeper reads each App Store app's notification history with that app's token: the primary app's under the
    /// name it had before apps were named, the others' named by their app.
    @Test func theSweeperReconcilesEachAppStoreApp() async throws {
        let key = directory.appendingPathComponent("key.p8")
        try Data(try PrivateKey.generateP256().pemRepresentation().utf8).write(to: key)
        let root = directory.appendingPathComponent("root.pem")
        try Data(try TestPKI.make().root.pemRepresentation.utf8).write(to: root)
        _ = try await store.migrate()
        let variables = try variables(apps(puzzleCatalog: true), [
            "IAP_APPSTORE_API_URL": "http://127.0.0.1:1", "IAP_APPSTORE_KEY_ID": "K", "IAP_APPSTORE_ISSUER_ID": "I", "IAP_APPSTORE_PRIVATE_KEY_FILE": key.path,
            "IAP_ENVIRONMENT": "Sandbox", "IAP_ALLOW_UNSIGNED_TEST_DATA": "", "IAP_ROOT_CERTIFICATES": root.path])
        let sweeper = try WorkerApp.embedded(command: "iap-sweeper", settings: Workers.sweeperSettings, arguments: ["--kafka", "log_level=0"],
                                             variables: variables, store: store)
        let reconciler = try #require(try Workers.sweeperServices(sweeper).reconciler)
        let passes = try await reconciler.reconcileOnce()
        #expect(Set(passes.keys) == ["Sandbox", "Sandbox:puzzle"], "\(passes)")
    }
}

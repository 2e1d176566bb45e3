import Foundation
import JSONSchema
import PurchaseDomain
import PurchaseEvents
import Testing
import TestSupport

/// The apps file: what it says reaches the app directory, and what is wrong in it is named by its field.
@Suite struct AppsFileTests {
    static let schemas = try! JSONSchemaRegistry(directory: TestServices.packageRoot.appendingPathComponent("schemas"))

    /// A directory holding `apps` as apps.json and `files` beside it.
    func write(_ apps: String, files: [String: String] = [:]) throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apps-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for (name, text) in files { try Data(text.utf8).write(to: directory.appendingPathComponent(name)) }
        let file = directory.appendingPathComponent("apps.json")
        try Data(apps.utf8).write(to: file)
        return file
    }

    func load(_ apps: String, files: [String: String] = [:]) throws -> AppsFile {
        try AppsFile(contentsOf: try write(apps, files: files), schemas: Self.schemas)
    }

    func error(_ apps: String, files: [String: String] = [:]) -> String {
        do { _ = try load(apps, files: files); return "accepted" } catch { return "\(error)" }
    }

    /// Two games: one on all three stores with its catalog in a file beside the apps file, one on the App Store with its
    /// catalog inline; each store's name of each finds it, and the same product id means what each app's catalog says.
    @Test func eachStoresNameFindsItsAppAndCatalog() throws {
        let file = try load("""
            {"apps": [
              {"id": "coins-game", "appstore": {"bundleId": "com.example.coins", "appAppleId": 1},
               "appcoins": {"package": "com.example.coins", "publicKeyFile": "keys/ac.pub"},
               "googleplay": {"package": "com.example.coins.play", "publicKeyFile": "/etc/keys/gp.pub"}, "catalog": "coins.json"},
              {"id": "puzzle", "appstore": {"bundleId": "com.example.puzzle", "acceptSandbox": true},
               "catalog": {"appstore": {"pack.small": {"type": "consumable", "currency": "hints", "amount": 5}}}}
            ]}
            """, files: ["coins.json": #"{"appstore": {"pack.small": {"type": "consumable", "currency": "coins", "amount": 100}}}"#])
        let apps = file.directory
        #expect(apps.namesApps)
        #expect(apps.primary.id == "coins-game")
        #expect(apps.app(store: .appstore, storeName: "com.example.puzzle")?.id == "puzzle")
        #expect(apps.app(store: .appcoins, storeName: "com.example.coins")?.id == "coins-game")
        #expect(apps.app(store: .googleplay, storeName: "com.example.coins.play")?.id == "coins-game")
        #expect(apps.app(store: .googleplay, storeName: "com.example.coins") == nil, "a package is named per store")
        #expect(apps.app(store: .appstore, storeName: "com.example.puzzle ") == nil)
        let grants = { (app: AppID?) in apps.catalog(for: app)?.grants(store: .appstore, productId: "pack.small", quantity: 1, purchaseDate: nil, expiresDate: nil) }
        #expect(grants("coins-game") == [.currency("coins", 100)])
        #expect(grants("puzzle") == [.currency("hints", 5)])
        #expect(grants(nil) == [.currency("coins", 100)], "no app named: the primary app's")
        #expect(grants("retired") == nil, "an app the deployment does not have: no catalog is guessed")
        #expect(file.apps[0].appCoins?.publicKeyFile.path.hasSuffix("/keys/ac.pub") == true, "relative to the apps file")
        #expect(file.apps[0].googlePlay?.publicKeyFile.path == "/etc/keys/gp.pub")
        #expect(file.apps[1].appAppleId == nil)
        #expect(apps.apps.map(\.acceptsSandbox) == [nil, true], "in review: its Sandbox purchases taken; the other as the deployment says")
    }

    @Test func whatIsWrongIsNamedByItsField() {
        let store = #""appstore": {"bundleId": "com.example.a"}"#
        #expect(error(#"{"apps": [{"id": "Coins Game", \#(store)}]}"#).contains("/apps/0/id"))
        #expect(error(#"{"apps": [{"id": "a", "appstore": {"bundleId": "com.example.a", "appAppleId": "12"}}]}"#).contains("/apps/0/appstore/appAppleId"))
        #expect(error(#"{"apps": [{"id": "a", "appstore": {"bundle": "com.example.a"}}]}"#).contains("/apps/0/appstore"))
        #expect(error(#"{"apps": [{"id": "a", "appstore": {"bundleId": "com.example.a", "acceptSandbox": "yes"}}]}"#).contains("/apps/0/appstore/acceptSandbox"))
        #expect(error(#"{"apps": []}"#).contains("/apps"))
        #expect(error(#"{"apps": [{"id": "a"}]}"#).contains("/apps/0"), "an app sold nowhere")
        #expect(error(#"{"apps": [{"id": "a", \#(store)}, {"id": "a", "appstore": {"bundleId": "com.example.b"}}]}"#).contains("apps[1].id"))
        #expect(error(#"{"apps": [{"id": "a", \#(store)}, {"id": "b", \#(store)}]}"#).contains("apps[1].appstore: 'com.example.a' belongs to apps[0]"))
        #expect(error(#"{"apps": [{"id": "a", \#(store), "catalog": "missing.json"}]}"#).contains("apps[0].catalog"))
        #expect(error(#"{"apps": [{"id": "a", \#(store), "catalog": {"appstore": {"p": {"type": "consumable"}}}}]}"#).contains("/apps/0/catalog"))
        #expect(error(#"{"apps": [{"id": "a", \#(store)}], "extra": 1}"#).contains("extra"))
    }

    /// One app per operator-given id, compared by bytes: "é" spelled two ways is two apps, and two bundle ids spelled so
    /// are two names.
    @Test func namesAreComparedAsBytes() throws {
        let apps = try AppDirectory(apps: [.init(id: "a", bundleIds: ["caf\u{E9}.app"]), .init(id: "b", bundleIds: ["cafe\u{301}.app"])])
        #expect(apps.app(store: .appstore, storeName: "caf\u{E9}.app")?.id == "a")
        #expect(apps.app(store: .appstore, storeName: "cafe\u{301}.app")?.id == "b")
    }

    /// The single-app settings make one app, `default`, that names itself in nothing it records.
    @Test func theSingleAppSettingsNameNoApp() {
        let apps = AppDirectory(unnamed: .init(id: "ignored", bundleIds: ["com.example.coins"]))
        #expect(apps.primary.id == AppDirectory.unnamedAppID)
        #expect(apps.recordedID(of: apps.primary) == nil)
        #expect(!apps.namesApps)
    }
}

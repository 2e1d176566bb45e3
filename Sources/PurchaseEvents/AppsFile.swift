import Foundation
import JSON
import JSONSchema
import PurchaseDomain

/// The apps file an operator writes (`schemas/apps.v1.schema.json`): the deployment's apps, each with how each store
/// names it, where its Android public keys are, and its catalog (inline, or a catalog file). Paths are relative to
/// the apps file.
public struct AppsFile: Sendable {
    public static let schemaID = "urn:iap-pipeline:schema:apps:v1"

    /// An app on an Android store (AppCoins, Google Play): its package and the file holding its public key.
    public struct AndroidApp: Sendable {
        public var package: PackageName
        public var publicKeyFile: URL
    }

    /// One app as written.
    public struct App: Sendable {
        public var id: AppID
        public var bundleId: BundleID?
        public var appAppleId: Int64?
        /// `appstore.acceptSandbox`: nil when the file does not say.
        public var acceptsSandbox: Bool?
        public var appCoins: AndroidApp?
        public var googlePlay: AndroidApp?
        /// `stripe`: the app sells on the web through Stripe Checkout (its prices are its catalog's `stripe` products).
        public var sellsOnStripe: Bool
        public var catalog: ProductCatalog?
    }

    /// In the file's order (the first is the primary app).
    public let apps: [App]
    /// The same apps as the pipeline looks them up.
    public let directory: AppDirectory

    public init(contentsOf url: URL, schemas: JSONSchemaRegistry) throws {
        guard let data = FileManager.default.contents(atPath: url.path) else { throw AppsFileError("cannot read \(url.path)") }
        try self.init(json: data, relativeTo: url.deletingLastPathComponent(), schemas: schemas)
    }

    /// - Throws: `AppsFileError` naming the field (`/apps/1/appstore/bundleId: …`) or the app (`apps[1].catalog: …`).
    public init(json data: Data, relativeTo directory: URL, schemas: JSONSchemaRegistry) throws {
        guard let document = JSONValue.parse(Array(data)) else { throw AppsFileError("not valid JSON") }
        let violations = schemas.validate(document, against: Self.schemaID)
        guard violations.isEmpty else { throw AppsFileError(violations.map(\.description).joined(separator: "; ")) }
        func path(_ text: String) -> URL {
            text.hasPrefix("/") ? URL(fileURLWithPath: text) : directory.appendingPathComponent(text)
        }
        func android(_ value: JSONValue?) -> AndroidApp? {
            guard let fields = value?.objectValue, let package = fields["package"]?.stringValue, let file = fields["publicKeyFile"]?.stringValue else { return nil }
            return AndroidApp(package: PackageName(package), publicKeyFile: path(file))
        }
        var apps: [App] = []
        for (index, entry) in (document.objectValue?["apps"]?.arrayValue ?? []).enumerated() {
            let fields = entry.objectValue ?? [:]
            let appStore = fields["appstore"]?.objectValue
            var app = App(id: AppID(fields["id"]?.stringValue ?? ""), bundleId: appStore?["bundleId"]?.stringValue.map { BundleID($0) },
                          appAppleId: appStore?["appAppleId"]?.int64Value, acceptsSandbox: appStore?["acceptSandbox"]?.boolValue,
                          appCoins: android(fields["appcoins"]), googlePlay: android(fields["googleplay"]),
                          sellsOnStripe: fields["stripe"] != nil)
            do {
                switch fields["catalog"] {
                case .string(let file)?: app.catalog = try ProductCatalog(contentsOf: path(file), schemas: schemas)
                case let inline?: app.catalog = try ProductCatalog(document: inline, schemas: schemas)
                case nil: break
                }
            } catch {
                let file = fields["catalog"]?.stringValue.map { " \(path($0).path)" } ?? ""
                throw AppsFileError("apps[\(index)].catalog ('\(app.id)')\(file): \(error)")
            }
            if app.sellsOnStripe, app.catalog?.products[.stripe]?.isEmpty ?? true {
                throw AppsFileError("apps[\(index)] ('\(app.id)') sells on Stripe: its catalog names the Stripe prices that are its own in a stripe section")
            }
            apps.append(app)
        }
        self.apps = apps
        do {
            self.directory = try AppDirectory(apps: apps.map {
                AppDirectory.App(id: $0.id, bundleIds: $0.bundleId.map { [$0] } ?? [], appCoinsPackages: $0.appCoins.map { [$0.package] } ?? [],
                                 googlePlayPackages: $0.googlePlay.map { [$0.package] } ?? [],
                                 stripePrices: $0.sellsOnStripe ? $0.catalog?.stripePrices ?? [] : [],
                                 catalog: $0.catalog, acceptsSandbox: $0.acceptsSandbox)
            })
        } catch {
            throw AppsFileError("\(error)")
        }
    }
}

/// An apps file that cannot be used; the message names the field.
public struct AppsFileError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

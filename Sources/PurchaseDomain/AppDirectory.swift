/// The deployment's apps: which app a store's purchase belongs to (by the bundle id or package name the store signed),
/// and what each app's products are. The same game sold on the App Store, AppCoins and Google Play is one app; three
/// games are three, each with its own catalog (a product id is unique within its app and store only).
///
/// Apps are in the order the operator listed them. The first is the **primary** app: what was recorded or sent before
/// purchases named their app (events without `app`, stored purchases from before) belongs to it. A deployment that
/// does not name its apps (the single-app settings) has one app, `default`, and names none in what it records
/// (`recordedID`): moving to an apps file later, what it recorded belongs to the file's first app.
public struct AppDirectory: Sendable {
    /// One app: its id, how each store names it (an apps file gives one name per store; the single-app settings may
    /// give several packages), its products.
    public struct App: Sendable {
        public var id: AppID
        public var bundleIds: [BundleID]
        public var appCoinsPackages: [PackageName]
        public var googlePlayPackages: [PackageName]
        /// The Stripe prices (or products) this app sells on the web: its catalog's `stripe` products, by which a Checkout
        /// Session's line items are known to be this app's.
        public var stripePrices: [ProductID]
        public var catalog: ProductCatalog?
        /// Whether a Production deployment takes this app's App Store purchases signed for the Sandbox (App Review's,
        /// TestFlight's); nil: as the deployment does (`--accept-sandbox`).
        public var acceptsSandbox: Bool?

        public init(id: AppID, bundleIds: [BundleID] = [], appCoinsPackages: [PackageName] = [], googlePlayPackages: [PackageName] = [],
                    stripePrices: [ProductID] = [], catalog: ProductCatalog? = nil, acceptsSandbox: Bool? = nil) {
            self.stripePrices = stripePrices
            self.id = id
            self.acceptsSandbox = acceptsSandbox
            self.bundleIds = bundleIds
            self.appCoinsPackages = appCoinsPackages
            self.googlePlayPackages = googlePlayPackages
            self.catalog = catalog
        }

        /// How `store` names this app (its bundle ids, package names, or Stripe prices); empty when the app is not sold there.
        public func storeNames(_ store: Store) -> [String] {
            switch store {
            case .appstore: bundleIds.map(\.rawValue)
            case .appcoins: appCoinsPackages.map(\.rawValue)
            case .googleplay: googlePlayPackages.map(\.rawValue)
            case .stripe: stripePrices.map(\.rawValue)
            }
        }

        /// The stores this app is sold in, in `Store.allCases` order.
        public var stores: [Store] { Store.allCases.filter { !storeNames($0).isEmpty } }
    }

    /// The id of the one app of a deployment that does not name its apps.
    public static let unnamedAppID: AppID = "default"

    /// A bundle id or package name, whichever the store names apps by.
    private enum StoreName {}

    /// In the operator's order; never empty.
    public let apps: [App]
    private let byId: [AppID: Int]
    /// Index into `apps` by store and the store's name of the app, compared as bytes.
    private let byStoreName: [Store: [Identifier<StoreName>: Int]]

    /// - Throws: `AppDirectoryError` for no app, an id given twice, a bundle id or package given to two apps of one store, or
    ///   an item code spelled two ways (two Unicode spellings of one text) in two apps' catalogs.
    /// Whether the operator named the apps (an apps file): then what is recorded names its app.
    public let namesApps: Bool

    /// The apps of an apps file.
    public init(apps: [App]) throws {
        try self.init(apps: apps, named: true)
    }

    /// The one app of a deployment configured by the single-app settings: `default`, named in nothing it records.
    public init(unnamed app: App) {
        var app = app
        app.id = Self.unnamedAppID
        self.init(checked: [app], named: false, byStoreName: Store.allCases.reduce(into: [:]) { names, store in
            names[store] = Dictionary(app.storeNames(store).map { (Identifier($0), 0) }, uniquingKeysWith: { first, _ in first })
        })
    }

    private init(apps: [App], named: Bool) throws {
        guard !apps.isEmpty else { throw AppDirectoryError("at least one app is required") }
        var ids: Set<AppID> = []
        var byStoreName: [Store: [Identifier<StoreName>: Int]] = [:]
        for (index, app) in apps.enumerated() {
            guard ids.insert(app.id).inserted else {
                throw AppDirectoryError("apps[\(index)].id: '\(app.id)' is the id of another app too")
            }
            for store in Store.allCases {
                for name in app.storeNames(store) {
                    if let other = byStoreName[store, default: [:]].updateValue(index, forKey: Identifier(name)) {
                        throw AppDirectoryError("apps[\(index)].\(store.rawValue): '\(name)' belongs to apps[\(other)] ('\(apps[other].id)') too; "
                                                + "one app sold under one name, or two names")
                    }
                }
            }
        }
        // Balances and entitlements are the user's, whichever app gave them: one code in two spellings in two catalogs
        // would be two balances of what the operator reads as one currency.
        let catalogued = apps.indices.filter { apps[$0].catalog != nil }
        if let (one, other) = ProductCatalog.twoSpellings(in: catalogued.compactMap { apps[$0].catalog }) {
            let (first, second) = (catalogued[one.catalog], catalogued[other.catalog])
            throw AppDirectoryError("apps[\(first)].catalog ('\(apps[first].id)') and apps[\(second)].catalog ('\(apps[second].id)'): the item codes "
                                    + "\(one.code.quotedWithHex) and \(other.code.quotedWithHex) are one text in two Unicode spellings: spell them alike, "
                                    + "or name two items")
        }
        self.init(checked: apps, named: named, byStoreName: byStoreName)
    }

    private init(checked apps: [App], named: Bool, byStoreName: [Store: [Identifier<StoreName>: Int]]) {
        self.namesApps = named
        self.apps = apps
        self.byId = Dictionary(apps.enumerated().map { ($1.id, $0) }, uniquingKeysWith: { first, _ in first })
        self.byStoreName = byStoreName
    }

    /// The app every purchase recorded without one belongs to.
    public var primary: App { apps[0] }

    /// What a purchase of `app` records and announces as its app: its id, or nil in a deployment that names no apps.
    public func recordedID(of app: App) -> AppID? { namesApps ? app.id : nil }

    /// The app `id` names; nil for an id this deployment does not have.
    public func app(_ id: AppID) -> App? { byId[id].map { apps[$0] } }

    /// The app `store` sells as `storeName` (a bundle id or package name, compared as bytes); nil when none is configured.
    public func app(store: Store, storeName: String) -> App? {
        byStoreName[store]?[Identifier(storeName)].map { apps[$0] }
    }

    /// The catalog of the app a purchase names: the primary app's when it names none (recorded before apps were named);
    /// nil for an app this deployment does not have (its products are unknown, never guessed from another app's).
    public func catalog(for id: AppID?) -> ProductCatalog? {
        guard let id else { return primary.catalog }
        return app(id)?.catalog
    }
}

/// An apps configuration that cannot be used; the message names the app and field.
public struct AppDirectoryError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

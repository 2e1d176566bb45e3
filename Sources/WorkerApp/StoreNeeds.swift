import PurchaseDomain

extension Workers {
    /// Stops a worker that lacks what one of its apps' stores needs, naming every app, store and setting missing at once;
    /// `need` answers what this worker misses for `app` on `store` (nothing when it has all). A deployment may sell in any
    /// mix of stores: what a store it does not sell in would need is never asked for.
    static func requireWhatTheStoresNeed(_ apps: AppDirectory, worker: String, _ need: (AppDirectory.App, Store) -> [String]) throws {
        var missing: [String] = []
        for app in apps.apps {
            for store in app.stores {
                let seller = apps.namesApps ? "the app '\(app.id)' sells on \(store.displayName)" : "\(store.displayName) purchases"
                missing += need(app, store).map { "\(seller): \(worker) needs \($0)" }
            }
        }
        guard missing.isEmpty else { throw SettingsError(missing.joined(separator: "; ")) }
    }

    /// Stops a worker whose settings name no store to sell in: an apps file lists at least one per app (its schema), the
    /// single-app settings may name none.
    static func requireSomeStore(_ apps: AppDirectory) throws {
        guard apps.apps.allSatisfy({ $0.stores.isEmpty }) else { return }
        throw SettingsError("no store is configured: give --apps (IAP_APPS_FILE), or --bundle-id (IAP_BUNDLE_ID), --googleplay-app (IAP_GOOGLEPLAY_APPS) "
                            + "or --appcoins-app (IAP_APPCOINS_APPS)")
    }
}

import Foundation
import PurchaseDomain

/// One store and one app: what the store-wide figures are split by. `app` is nil for purchases recorded without an
/// app (a deployment without an apps file, or recorded before it had one).
public struct StoreAndApp: Sendable, Hashable {
    public var store: Store
    public var app: AppID?

    public init(store: Store, app: AppID? = nil) {
        self.store = store
        self.app = app
    }
}

/// The open figures of one store and app.
public struct OpenPurchaseFigures: Sendable, Hashable {
    /// Purchases verified or granted (not finished, flagged or revoked), by state.
    public var byState: [PurchaseState: Int] = [:]
    /// When the oldest of them was bought.
    public var oldestUnfinished: Date?
    /// Charges the store announced that no user claimed yet (`unclaimed`), and when the oldest was paid.
    public var unclaimedCharges: Int = 0
    public var oldestUnclaimed: Date?

    public init(byState: [PurchaseState: Int] = [:], oldestUnfinished: Date? = nil, unclaimedCharges: Int = 0, oldestUnclaimed: Date? = nil) {
        self.byState = byState
        self.oldestUnfinished = oldestUnfinished
        self.unclaimedCharges = unclaimedCharges
        self.oldestUnclaimed = oldestUnclaimed
    }
}

/// What `/metrics` reads at each scrape: bounded by the purchases in flight.
public struct OpenPurchaseStatistics: Sendable, Hashable {
    /// Per store and app; a store and app with nothing open is absent.
    public var byStoreAndApp: [StoreAndApp: OpenPurchaseFigures]
    /// Purchases whose product type is `unknown` (recorded before types were kept, not named by the catalog).
    public var unknownProductType: Int
    /// The app's consumption reports kept for purchases not recorded (yet): a report that waits long names a purchase
    /// that never came (an app sending wrong ids, a submission lost).
    public var consumptionReportsWaiting: Int = 0

    public init(byStoreAndApp: [StoreAndApp: OpenPurchaseFigures], unknownProductType: Int, consumptionReportsWaiting: Int = 0) {
        self.byStoreAndApp = byStoreAndApp
        self.unknownProductType = unknownProductType
        self.consumptionReportsWaiting = consumptionReportsWaiting
    }

    /// Open purchases of every store and app, by state.
    public var openPurchasesByState: [PurchaseState: Int] {
        byStoreAndApp.values.reduce(into: [:]) { total, figures in total.merge(figures.byState, uniquingKeysWith: +) }
    }
    public var oldestUnfinishedPurchase: Date? { byStoreAndApp.values.compactMap(\.oldestUnfinished).min() }
    public var unclaimedCharges: Int { byStoreAndApp.values.reduce(0) { $0 + $1.unclaimedCharges } }
    public var oldestUnclaimedCharge: Date? { byStoreAndApp.values.compactMap(\.oldestUnclaimed).min() }
}

/// Every purchase by state, with the open figures: for the demo's books and tests.
public struct StoreStatistics: Sendable, Hashable {
    public var purchasesByState: [PurchaseState: Int]
    public var oldestUnfinishedPurchase: Date?
    /// Purchases whose product type is `unknown` (recorded before types were kept, not named by the catalog).
    public var unknownProductType: Int
}

import Foundation
import PurchaseDomain

/// What `/metrics` reads at each scrape: bounded by the purchases in flight.
public struct OpenPurchaseStatistics: Sendable, Hashable {
    /// Purchases verified or granted (not finished, flagged or revoked), by state.
    public var openPurchasesByState: [PurchaseState: Int]
    public var oldestUnfinishedPurchase: Date?
    /// Purchases whose product type is `unknown` (recorded before types were kept, not named by the catalog).
    public var unknownProductType: Int
    /// The app's consumption reports kept for purchases not recorded (yet): a report that waits long names a purchase
    /// that never came (an app sending wrong ids, a submission lost).
    public var consumptionReportsWaiting: Int = 0
    /// Charges the store announced that no user claimed yet (`unclaimed`), and when the oldest was paid.
    public var unclaimedCharges: Int = 0
    public var oldestUnclaimedCharge: Date?
}

/// Every purchase by state, with the open figures: for the demo's books and tests.
public struct StoreStatistics: Sendable, Hashable {
    public var purchasesByState: [PurchaseState: Int]
    public var oldestUnfinishedPurchase: Date?
    /// Purchases whose product type is `unknown` (recorded before types were kept, not named by the catalog).
    public var unknownProductType: Int
}

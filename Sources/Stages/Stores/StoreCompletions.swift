import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

/// One store as the finisher meets a granted purchase it completes through the store's API (the App Store's Finish
/// Transaction, Google Play's consume or acknowledge). Each store that has such an API implements it once, in its folder
/// (`Stores/<store>/`); `StoreCompletions` holds those configured. A store without one (AppCoins, Stripe) finishes by
/// the app's report or at the grant (`FinishPolicy`).
public protocol PurchaseCompletion: Sendable {
    /// How a purchase completed through this API is finished (`transaction.finished`'s `method`).
    var method: FinishMethod { get }
    /// The calls the batch's granted purchases of this store (`grants`) owe now, made at once before its transaction
    /// (which never waits on the store), by transaction id; `store` tells their states.
    func calls(owedBy grants: [ItemGranted], in store: any ConsumptionRequestRepository) async throws -> [TransactionID: Result<Void, StoreAPIFailure>]
    /// Completes granted `record` through the API and finishes it (`finishing`): with the batch's answers (`answered`,
    /// nil when it is handled alone: the call made now). A call the API could not take now throws (retried); one it
    /// refused is a dead letter with its status; a purchase granted after the batch's calls were made throws too (alone
    /// next time).
    func complete(_ record: PurchaseRecord, granted: ItemGranted, answered: [TransactionID: Result<Void, StoreAPIFailure>]?,
                  finishing: (FinishMethod) async throws -> StageResult) async throws -> StageResult
}

/// The finisher's stores completed through their API, keyed by store.
public struct StoreCompletions: Sendable {
    public var appStore: AppStoreCompletion?
    public var googlePlay: GooglePlayCompletion?

    public init(appStore: AppStoreCompletion? = nil, googlePlay: GooglePlayCompletion? = nil) {
        self.appStore = appStore
        self.googlePlay = googlePlay
    }

    /// How `store`'s purchases are completed through its API; nil when they are not (no API, or none configured).
    public func completion(of store: Store) -> (any PurchaseCompletion)? {
        switch store {
        case .appstore: appStore
        case .googleplay: googlePlay
        case .appcoins: nil // no server call completes an AppCoins purchase
        case .stripe: nil // a Checkout Session is complete once paid: nothing to call
        }
    }
}

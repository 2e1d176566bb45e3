import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// One store as the verifier meets a submission of it: what the submission proves, and whether proving it waits on the
/// store's API. Each store implements it once, in its folder (`Stores/<store>/`); `StoreVerifiers` holds those of the
/// stores the deployment's apps sell in.
public protocol SubmissionVerifier: Sendable {
    /// Whether proving a submission calls the store's API over the network: such submissions are proved at once, before a
    /// batch's transaction, and a message naming one (`apiMarkers`) ends its batch when it was not proved before it.
    var asksTheStoresAPI: Bool { get }
    /// Bytes whose presence in a message means handling it may call the store's API (its submissions' kind, its
    /// notifications that are read back); empty for a store verified locally.
    var apiMarkers: [Data] { get }
    /// The purchases `submission` proves, or why it proves none; `apps` names the product types where the store does not.
    func proven(_ submission: PurchaseSubmitted, apps: AppDirectory?) async -> Result<[VerifiedPurchase], Rejection>
}

/// The stores a verifier's apps sell in, keyed by store: each with what verifying its submissions and notifications
/// takes. A store absent is one no app sells in: what claims to be from it is refused (`notConfigured`).
public struct StoreVerifiers: Sendable {
    public var appStore: AppStoreVerifiers?
    public var appCoins: AppCoinsVerifier?
    public var googlePlay: GooglePlayVerifier?
    public var stripe: StripeVerifier?

    public init(appStore: AppStoreVerifiers? = nil, appCoins: AppCoinsVerifier? = nil, googlePlay: GooglePlayVerifier? = nil,
                stripe: StripeVerifier? = nil) {
        self.appStore = appStore
        self.appCoins = appCoins
        self.googlePlay = googlePlay
        self.stripe = stripe
    }

    /// The verifier of `store`'s submissions; nil when no app sells there.
    public func verifier(of store: Store) -> (any SubmissionVerifier)? {
        switch store {
        case .appstore: appStore
        case .appcoins: appCoins
        case .googleplay: googlePlay
        case .stripe: stripe
        }
    }

    /// The markers of every configured store verified through its API (`SubmissionVerifier.apiMarkers`).
    var apiMarkers: [Data] { Store.allCases.compactMap(verifier(of:)).filter(\.asksTheStoresAPI).flatMap(\.apiMarkers) }

    /// The refusal of what names a store none of the deployment's apps sells in.
    public static func notConfigured(_ store: Store) -> Rejection {
        Rejection(.storeRejected, "\(store.displayName) is not configured: no app of this deployment sells there")
    }

    /// The refusal of a submission whose kind is not one of its store's (the schema pairs them; a producer may not).
    static func wrongKind(_ submission: PurchaseSubmitted) -> Rejection {
        Rejection(.malformedPayload, "a \(submission.store.displayName) submission of kind \(submission.kind.rawValue) carries no proof of that store")
    }
}

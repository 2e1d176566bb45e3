import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// The App Store's verifiers of a deployment that sells there: its signed data (StoreKit 2) and app receipts (StoreKit 1),
/// and, for a production deployment that takes sandbox purchases too (App Review buys there), the sandbox's beside them,
/// asked only about what production's refuse as `wrongEnvironment`.
public struct AppStoreVerifiers: Sendable {
    public let signedData: SignedDataVerifier
    public let receipts: ReceiptVerifier?
    public let sandbox: (signedData: SignedDataVerifier, receipts: ReceiptVerifier?)?
    /// Whether an app whose apps file entry does not say (`AppDirectory.App.acceptsSandbox`) takes Sandbox purchases.
    public let sandboxByDefault: Bool

    public init(signedData: SignedDataVerifier, receipts: ReceiptVerifier? = nil, sandbox: (signedData: SignedDataVerifier, receipts: ReceiptVerifier?)? = nil,
                sandboxByDefault: Bool = true) {
        self.signedData = signedData
        self.receipts = receipts
        self.sandbox = sandbox
        self.sandboxByDefault = sandboxByDefault
    }

    /// `verdict`, or, when it is `wrongEnvironment` and sandbox purchases are accepted, the sandbox verifiers'
    /// (`inTheSandbox`) of an app that accepts them (`bundleId` of what they verified: `acceptsSandbox`).
    func orInTheSandbox<T>(_ verdict: Result<T, Rejection>, bundleId: (T) -> BundleID?, apps: AppDirectory?,
                           _ inTheSandbox: ((signedData: SignedDataVerifier, receipts: ReceiptVerifier?)) -> Result<T, Rejection>) -> Result<T, Rejection> {
        guard case .failure(let rejection) = verdict, rejection.reason == .wrongEnvironment, let sandbox else { return verdict }
        let second = inTheSandbox(sandbox)
        switch second {
        case .failure(let again) where again.reason == .wrongEnvironment: return verdict // neither: say what production expects
        case .success(let value) where !acceptsSandbox(bundleId: bundleId(value), apps: apps): return verdict // not for this app
        default: return second
        }
    }

    /// Whether the app of `bundleId` takes Sandbox purchases: as its apps file entry says, else as the deployment does.
    func acceptsSandbox(bundleId: BundleID?, apps: AppDirectory?) -> Bool {
        bundleId.flatMap { apps?.app(store: .appstore, storeName: $0.rawValue) }?.acceptsSandbox ?? sandboxByDefault
    }
}

extension AppStoreVerifiers: SubmissionVerifier {
    /// Verified locally: signatures and chains, no call to Apple.
    public var asksTheStoresAPI: Bool { false }
    public var apiMarkers: [Data] { [] }

    public func proven(_ submission: PurchaseSubmitted, apps: AppDirectory?) async -> Result<[VerifiedPurchase], Rejection> {
        switch submission.kind {
        case .signedTransaction:
            let signed = submission.signedTransaction ?? ""
            return orInTheSandbox(signedData.verifyTransaction(signed), bundleId: \.bundleId, apps: apps) { $0.signedData.verifyTransaction(signed) }
                .map { [VerifiedPurchase($0)] }
        case .appReceipt:
            guard let receipts else { return .failure(Rejection(.storeRejected, "app receipts are not configured")) }
            let receipt = submission.receipt ?? ""
            return orInTheSandbox(receipts.verify(base64: receipt), bundleId: \.bundleId, apps: apps) {
                $0.receipts?.verify(base64: receipt) ?? .failure(Rejection(.wrongEnvironment, "sandbox receipts are not configured"))
            }.flatMap(\.verifiedPurchases).flatMap { purchases in
                purchases.isEmpty ? .failure(Rejection(.noPurchases, "the receipt is genuine but lists no in-app purchase")) : .success(purchases)
            }
        case .appcoinsPurchase, .googlePlayPurchase, .stripeCheckout:
            return .failure(StoreVerifiers.wrongKind(submission))
        }
    }
}

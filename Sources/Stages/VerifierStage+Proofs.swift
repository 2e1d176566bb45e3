import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// What a submission proves: each store's verification of its proof, the sandbox's when the app takes sandbox purchases,
/// and the bounds every proven purchase must meet before an event carries it.
extension VerifierStage {
    /// The purchases a submission proves, or why it proves none (a store that is not configured among the reasons; a
    /// quantity no event can carry, however genuine its proof).
    func verify(_ submission: PurchaseSubmitted) async -> Result<[VerifiedPurchase], Rejection> {
        await proven(submission).flatMap { purchases in
            guard let odd = purchases.first(where: { !CurrencyAmounts.quantities.contains($0.quantity) }) else { return .success(purchases) }
            return .failure(Rejection(.malformedPayload, "quantity \(odd.quantity) of \(odd.transactionId) is not within \(CurrencyAmounts.quantities): no event can carry it"))
        }
    }

    private func proven(_ submission: PurchaseSubmitted) async -> Result<[VerifiedPurchase], Rejection> {
        switch submission.kind {
        case .signedTransaction:
            guard let appStore else { return .failure(Self.notConfigured(.appstore)) }
            let signed = submission.signedTransaction ?? ""
            return orInTheSandbox(appStore.verifyTransaction(signed), bundleId: \.bundleId) { $0.appStore.verifyTransaction(signed) }.map { [VerifiedPurchase($0)] }
        case .appReceipt:
            guard let receipts else { return .failure(appStore == nil ? Self.notConfigured(.appstore) : Rejection(.storeRejected, "app receipts are not configured")) }
            let receipt = submission.receipt ?? ""
            return orInTheSandbox(receipts.verify(base64: receipt), bundleId: \.bundleId) {
                $0.receipts?.verify(base64: receipt) ?? .failure(Rejection(.wrongEnvironment, "sandbox receipts are not configured"))
            }.flatMap(\.verifiedPurchases).flatMap { purchases in
                purchases.isEmpty ? .failure(Rejection(.noPurchases, "the receipt is genuine but lists no in-app purchase")) : .success(purchases)
            }
        case .appcoinsPurchase:
            guard let appCoins, let purchase = submission.appcoins else { return .failure(Self.notConfigured(.appcoins)) }
            guard let purchaseData = purchase.purchaseData, let signature = purchase.signature else {
                return .failure(Rejection(.signatureRequired, "an AppCoins submission carries the SDK's purchaseData and its signature"))
            }
            return await appCoins.verifySigned(packageName: purchase.packageName, sku: purchase.sku, purchaseToken: purchase.purchaseToken,
                                               purchaseData: purchaseData, signature: signature).map { [VerifiedPurchase($0)] }
        case .googlePlayPurchase:
            guard let googlePlay, let purchase = submission.googleplay else { return .failure(Self.notConfigured(.googleplay)) }
            if isGooglePlaySubscription(packageName: purchase.packageName, productId: purchase.productId) {
                return await googlePlay.verifySignedSubscription(packageName: purchase.packageName, productId: purchase.productId,
                                                                 purchaseToken: purchase.purchaseToken, purchaseData: purchase.purchaseData,
                                                                 signature: purchase.signature).map { [VerifiedPurchase($0)] }
            }
            return await googlePlay.verifySigned(packageName: purchase.packageName, productId: purchase.productId, purchaseToken: purchase.purchaseToken,
                                                 purchaseData: purchase.purchaseData, signature: purchase.signature).map { [VerifiedPurchase($0)] }
        case .stripeCheckout:
            return await provenOnStripe(submission)
        }
    }

    /// A web purchase's Checkout Session, read back from Stripe and made by the submitting user.
    private func provenOnStripe(_ submission: PurchaseSubmitted) async -> Result<[VerifiedPurchase], Rejection> {
        guard let stripe, let checkout = submission.stripe else { return .failure(Self.notConfigured(.stripe)) }
        return await stripe.verifyCheckoutSession(checkout.checkoutSessionId, user: submission.userId).map { $0.purchases(store: .stripe) }
    }

    /// The refusal of what names a store none of the deployment's apps sells in.
    static func notConfigured(_ store: Store) -> Rejection {
        Rejection(.storeRejected, "\(store.displayName) is not configured: no app of this deployment sells there")
    }

    /// `verdict`, or, when it is `wrongEnvironment` and sandbox purchases are accepted, the sandbox verifiers'
    /// (`inTheSandbox`) of an app that accepts them (`bundleId` of what they verified: `acceptsSandbox`).
    func orInTheSandbox<T>(_ verdict: Result<T, Rejection>, bundleId: (T) -> BundleID?,
                           _ inTheSandbox: ((appStore: SignedDataVerifier, receipts: ReceiptVerifier?)) -> Result<T, Rejection>) -> Result<T, Rejection> {
        guard case .failure(let rejection) = verdict, rejection.reason == .wrongEnvironment, let sandbox else { return verdict }
        let second = inTheSandbox(sandbox)
        switch second {
        case .failure(let again) where again.reason == .wrongEnvironment: return verdict // neither: say what production expects
        case .success(let value) where !acceptsSandbox(bundleId: bundleId(value)): return verdict // not for this app
        default: return second
        }
    }

    /// Whether the app of `bundleId` takes Sandbox purchases: as its apps file entry says, else as the deployment does.
    func acceptsSandbox(bundleId: BundleID?) -> Bool {
        bundleId.flatMap { apps?.app(store: .appstore, storeName: $0.rawValue) }?.acceptsSandbox ?? sandboxByDefault
    }
}

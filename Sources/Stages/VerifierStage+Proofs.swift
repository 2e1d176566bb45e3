import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// What a submission proves: its store's verification of its proof (`Stores/<store>/`), and the bounds every proven
/// purchase must meet before an event carries it.
extension VerifierStage {
    /// The purchases a submission proves, or why it proves none (a store that is not configured among the reasons; a
    /// quantity no event can carry, however genuine its proof).
    func verify(_ submission: PurchaseSubmitted) async -> Result<[VerifiedPurchase], Rejection> {
        await proven(submission).flatMap { purchases in
            guard let odd = purchases.first(where: { !CurrencyAmounts.quantities.contains($0.quantity) }) else { return .success(purchases) }
            return .failure(Rejection(.malformedPayload, "quantity \(odd.quantity) of \(odd.transactionId) is not within \(CurrencyAmounts.quantities): no event can carry it"))
        }
    }

    /// What the submission's store proves of it (`SubmissionVerifier`), or the refusal of a store no app sells in.
    private func proven(_ submission: PurchaseSubmitted) async -> Result<[VerifiedPurchase], Rejection> {
        guard let verifier = stores.verifier(of: submission.store) else { return .failure(StoreVerifiers.notConfigured(submission.store)) }
        return await verifier.proven(submission, apps: apps)
    }
}

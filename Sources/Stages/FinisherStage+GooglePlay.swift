import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

extension FinisherStage {
    /// Completes a granted Google Play purchase with the Android Publisher API: a consumable is consumed (the user may buy
    /// it again), an entitlement acknowledged (a subscription through `purchases.subscriptions`). Google refunds a purchase neither acknowledged nor consumed within three
    /// days, so a call the API could not take now is retried (within the retry budget, then parked and re-driven), and one
    /// it refused is dead-lettered with its status.
    func completeOnGooglePlay(_ record: PurchaseRecord, with api: AndroidPublisherClient,
                              finishing: (FinishMethod) async throws -> StageResult) async throws -> StageResult {
        let consumable = record.productType == .consumable
        // The app consumed it on the device before the grant (the store said so at verification): nothing left to call.
        if consumable && record.storeConsumed { return try await finishing(.storeReportedConsumed) }
        guard let packageName = record.packageName, let token = record.purchaseToken else {
            return .deadLetter(reason: "storeRefusedFinish", detail: "purchase \(record.key) has no package name and purchase token to complete it with")
        }
        let answer = if consumable {
            await api.consume(packageName: packageName, productId: record.productId, purchaseToken: token)
        } else if record.productType == .autoRenewable {
            // A renewal's order shares the signup's token, acknowledged then: the call answers that it is.
            await api.acknowledgeSubscription(packageName: packageName, productId: record.productId, purchaseToken: token)
        } else {
            await api.acknowledge(packageName: packageName, productId: record.productId, purchaseToken: token)
        }
        switch answer {
        case .success:
            return try await finishing(.googlePlayAPI)
        case .failure(.unavailable(let why, let retryAfter)):
            throw TransientError(why, retryAfter: retryAfter)
        case .failure(.refused(let status, let detail)):
            return .deadLetter(reason: "storeRefusedFinish", detail: "Google Play \(consumable ? "consume" : "acknowledge"), HTTP \(status): \(detail)")
        }
    }
}

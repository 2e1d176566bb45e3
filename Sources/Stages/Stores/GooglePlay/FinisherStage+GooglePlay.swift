import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

/// Completing Google Play purchases with the Android Publisher API: a consumable is consumed (the user may buy it again),
/// an entitlement acknowledged (a subscription through `purchases.subscriptions`). Google refunds a purchase neither
/// acknowledged nor consumed within three days, so a call the API could not take now is retried (within the retry
/// budget, then parked and re-driven), and one it refused is dead-lettered with its status.
public struct GooglePlayCompletion: PurchaseCompletion {
    public let api: AndroidPublisherClient

    public init(api: AndroidPublisherClient) { self.api = api }

    public var method: FinishMethod { .googlePlayAPI }

    public func complete(_ record: PurchaseRecord, granted: ItemGranted, answered calls: [TransactionID: Result<Void, StoreAPIFailure>]?,
                         finishing: (FinishMethod) async throws -> StageResult) async throws -> StageResult {
        // In a batch's transaction: no call to the store's API while it is open.
        let answered = calls?[granted.transactionId]
        if calls != nil && answered == nil && Self.owesGooglePlayCall(record) {
            throw TransientError("purchase \(record.key.logged) was granted during its batch")
        }
        return try await completeOnGooglePlay(record, answered: answered, finishing: finishing)
    }

    /// - Parameter answered: the call's answer, made already for a batch (`calls(owedBy:in:)`); nil: made now.
    private func completeOnGooglePlay(_ record: PurchaseRecord, answered: Result<Void, StoreAPIFailure>?,
                                      finishing: (FinishMethod) async throws -> StageResult) async throws -> StageResult {
        let consumable = record.productType == .consumable
        // The app consumed it on the device before the grant (the store said so at verification): nothing left to call.
        if consumable && record.storeConsumed { return try await finishing(.storeReportedConsumed) }
        // A subscription period Google read acknowledged at verification (a renewal: the signup's acknowledgement covers
        // it): completed through the API already, never acknowledged again.
        if !Self.owesGooglePlayCall(record) { return try await finishing(.googlePlayAPI) }
        guard record.packageName != nil, record.purchaseToken != nil else {
            return .deadLetter(reason: "storeRefusedFinish", detail: "purchase \(record.key) has no package name and purchase token to complete it with")
        }
        let made = if let answered { answered } else { await Self.googlePlayCompletion(of: record, with: api) }
        guard let answer = made else { return try await finishing(.storeReportedConsumed) }
        switch answer {
        case .success:
            return try await finishing(.googlePlayAPI)
        case .failure(.unavailable(let why, let retryAfter)):
            throw TransientError(why, retryAfter: retryAfter)
        case .failure(.refused(let status, let detail)):
            return .deadLetter(reason: "storeRefusedFinish", detail: "Google Play \(consumable ? "consume" : "acknowledge"), HTTP \(status): \(detail)")
        }
    }

    /// The call that completes `record` at Google Play: a consumable consumed, a subscription's first purchase acknowledged
    /// through `purchases.subscriptions`, anything else acknowledged. Nil when none is owed (consumed on the device, a
    /// renewal read acknowledged) or it cannot be named.
    static func googlePlayCompletion(of record: PurchaseRecord, with api: AndroidPublisherClient) async -> Result<Void, AndroidPublisherClient.Failure>? {
        guard let packageName = record.packageName, let token = record.purchaseToken else { return nil }
        switch record.productType {
        case _ where !owesGooglePlayCall(record): return nil
        case .consumable: return await api.consume(packageName: packageName, productId: record.productId, purchaseToken: token)
        case .autoRenewable: return await api.acknowledgeSubscription(packageName: packageName, productId: record.productId, purchaseToken: token)
        default: return await api.acknowledge(packageName: packageName, productId: record.productId, purchaseToken: token)
        }
    }

    /// Whether completing `record` calls Google: not when verification read it completed already (`storeConsumed`), a
    /// consumable consumed on the device or a subscription period acknowledged (Google requires acknowledging only a
    /// subscription's first purchase; a renewal, a later order of the same token, reads acknowledged).
    static func owesGooglePlayCall(_ record: PurchaseRecord) -> Bool {
        !(record.storeConsumed && (record.productType == .consumable || record.productType == .autoRenewable))
    }

    /// The completion calls the batch's granted Google Play purchases (`grants`, all of Google Play) owe now, made at once before its transaction (which
    /// never waits on Google), by transaction id.
    public func calls(owedBy grants: [ItemGranted], in store: any ConsumptionRequestRepository) async throws
        -> [TransactionID: Result<Void, StoreAPIFailure>] {
        var reinstated: [PurchaseKey: Bool] = [:]
        for granted in grants {
            let key = PurchaseKey(store: .googleplay, transactionId: granted.transactionId)
            reinstated[key] = (reinstated[key] ?? false) || granted.reinstated == true
        }
        // Their records in one read.
        let owed = try await store.purchases(Array(reinstated.keys)).values.filter { record in
            guard case .callStoreAPI = FinishPolicy.onGrant(record, finishesThroughStoreAPI: .googlePlayAPI, reinstated: reinstated[record.key] ?? false) else { return false }
            return true
        }
        return await withTaskGroup(of: (TransactionID, Result<Void, AndroidPublisherClient.Failure>?).self) { group in
            for record in owed { group.addTask { [api] in (record.key.transactionId, await Self.googlePlayCompletion(of: record, with: api)) } }
            var answers: [TransactionID: Result<Void, AndroidPublisherClient.Failure>] = [:]
            for await (id, answer) in group { if let answer { answers[id] = answer } }
            return answers
        }
    }
}

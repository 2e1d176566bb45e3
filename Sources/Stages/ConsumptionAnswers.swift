import Foundation
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StoreVerification
import WorkerRuntime

/// The finisher's answers to the store's consumption requests (App Store `CONSUMPTION_REQUEST` → *Send Consumption
/// Information*), built from what the store knows of the purchase, sent only for users whose recorded answer to
/// sharing consumption data is yes, and only before the store's deadline. Every request ends recorded in
/// `consumption_answers`: `sent`, or why not.
extension FinisherStage {
    /// Why a request was not answered, as recorded.
    enum Unanswered: String {
        case noConsent, consentWithdrawn, unknownPurchase, familyShared, pastDeadline, noAPICredentials, refusedByStore, notAppStore
    }

    func record(_ consent: UserConsent) async throws -> StageResult {
        let stands = try await store.recordConsent(userId: consent.userId, consumptionData: consent.consumptionData, decidedAt: consent.decidedAt)
        context.logger.info(stands ? "consent recorded" : "consent superseded by a later decision",
                            ["userId": consent.userId, "consumptionData": consent.consumptionData ? "true" : "false"])
        return .publish([])
    }

    func answer(_ request: ConsumptionRequested) async throws -> StageResult {
        let key = PurchaseKey(store: request.store, transactionId: request.transactionId)
        if let earlier = try await store.consumptionAnswer(notificationUUID: request.notificationUUID) {
            context.logger.info("consumption request answered before", ["transactionId": request.transactionId, "outcome": earlier.outcome])
            return .publish([])
        }
        let (outcome, detail) = try await decideAndSend(request, key)
        try await store.recordConsumptionAnswer(key, notificationUUID: request.notificationUUID, outcome: outcome, detail: detail, at: context.now())
        if outcome == "sent" {
            context.logger.info("consumption information sent", ["transactionId": request.transactionId, "detail": detail ?? ""])
        } else {
            context.logger.warning("consumption request not answered", ["transactionId": request.transactionId, "reason": outcome, "detail": detail ?? ""])
        }
        return .publish([])
    }

    /// `sent` with what was said, or an `Unanswered` reason. Throws `TransientError` while the store's API may
    /// still answer before the deadline.
    private func decideAndSend(_ request: ConsumptionRequested, _ key: PurchaseKey) async throws -> (String, String?) {
        func unanswered(_ reason: Unanswered, _ detail: String) -> (String, String?) { (reason.rawValue, detail) }
        guard request.store == .appstore else { return unanswered(.notAppStore, "only the App Store asks for consumption information") }
        guard context.now() < request.answerBy else { return unanswered(.pastDeadline, "the store stopped waiting at \(request.answerBy)") }
        guard request.ownershipType != "FAMILY_SHARED" else { return unanswered(.familyShared, "the App Store takes no consumption information for family-shared transactions") }
        guard let record = try await store.purchase(key) else { return unanswered(.unknownPurchase, "the pipeline never recorded this transaction, so no user's consent applies") }
        switch try await store.consumptionDataConsent(of: record.userId) {
        case nil: return unanswered(.noConsent, "user \(record.userId) never consented to sharing consumption data")
        case false?: return unanswered(.consentWithdrawn, "user \(record.userId) declined or withdrew consent")
        case true?: break
        }
        guard let appStoreAPI else { return unanswered(.noAPICredentials, "the finisher has no App Store Server API credentials") }
        let consumption = Self.consumption(of: record, sampleContentProvided: sampleContentProvided)
        switch await appStoreAPI.sendConsumptionInformation(request.transactionId, consumption) {
        case .success:
            return ("sent", "deliveryStatus \(consumption.deliveryStatus.rawValue), consumptionPercentage \(consumption.consumptionPercentage.map(String.init) ?? "none")")
        case .failure(.unavailable(let why)): throw TransientError(why)
        case .failure(.refused(let status, let detail)): return unanswered(.refusedByStore, "HTTP \(status): \(detail)")
        }
    }

    /// What the store knows, as the API asks it: delivered when granted (finished, or flagged unconsumed at its
    /// deadline); a consumable is wholly consumed once finished (the app consumed it or it was finished after
    /// delivery), not at all before; how much of an entitlement was used the pipeline cannot tell, so no share is
    /// given (the API takes none for auto-renewable subscriptions anyway), and 0 for what was not delivered.
    static func consumption(of record: PurchaseRecord, sampleContentProvided: Bool) -> ConsumptionRequest {
        let delivered = [.granted, .finished, .refundDue].contains(record.state)
        let percentage: Int?
        switch record.productType {
        case .autoRenewable: percentage = nil
        case _ where !delivered: percentage = 0
        case .consumable: percentage = record.state == .finished || record.storeConsumed ? 100_000 : 0
        case .nonConsumable, .nonRenewing, .unknown: percentage = nil
        }
        return ConsumptionRequest(customerConsented: true, deliveryStatus: delivered ? .delivered : .undeliveredOther,
                                  sampleContentProvided: sampleContentProvided, consumptionPercentage: percentage)
    }
}

import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

/// The finisher's answers to the store's consumption requests (App Store `CONSUMPTION_REQUEST` → *Send Consumption
/// Information*), built from what the store knows of the purchase, sent only for users whose recorded answer to
/// sharing consumption data is yes, and only before the store's deadline. Every request ends recorded once in
/// `consumption_answers`: `sent`, or why not.
extension FinisherStage {
    /// Why a request was not answered, as recorded.
    enum Unanswered: String {
        case noConsent, consentWithdrawn, unknownPurchase, familyShared, pastDeadline, noAPICredentials, refusedByStore, notAppStore
    }

    /// How long a claim to answer a request is honoured before another attempt may take it over.
    static let claimTimeout: TimeInterval = 300

    func record(_ consent: UserConsent) async throws -> StageResult {
        let stands = try await store.recordConsent(userId: consent.userId, consumptionData: consent.consumptionData, decidedAt: consent.decidedAt,
                                                   now: context.now())
        context.logger.info(stands ? "consent recorded" : "consent superseded by a later decision",
                            ["userId": consent.userId, "consumptionData": consent.consumptionData ? "true" : "false"])
        return .publish([])
    }

    func answer(_ request: ConsumptionRequested) async throws -> StageResult {
        // `user.consent` is another topic: give its consumer `consentGrace` to catch up with decisions made around the
        // request (a withdrawal just before it must not be overtaken). Requests are rare; only this partition waits.
        let now = context.now()
        if now < request.requestedAt.addingTimeInterval(consentGrace), now < request.answerBy {
            throw TransientError("consumption request \(request.notificationUUID): waiting \(Int(consentGrace)) s for consent decisions to arrive")
        }
        let key = PurchaseKey(store: request.store, transactionId: request.transactionId)
        switch try await store.claimConsumptionRequest(key, notificationUUID: request.notificationUUID, at: now, staleAfter: Self.claimTimeout) {
        case .answered(let earlier):
            context.logger.info("consumption request answered before", ["transactionId": request.transactionId, "outcome": earlier.outcome])
            return .publish([])
        case .inProgress:
            throw TransientError("consumption request \(request.notificationUUID) is being answered by another attempt")
        case .claimed:
            break
        }
        let outcome: String, detail: String?
        do {
            (outcome, detail) = try await decideAndSend(request, key)
        } catch {
            // Not answered (the API did not answer, or the store failed): the next attempt may take the claim at once. If
            // releasing fails too, the claim lapses after `claimTimeout`; the error that matters is the first.
            try? await store.releaseConsumptionClaim(notificationUUID: request.notificationUUID)
            throw error
        }
        try await store.recordConsumptionAnswer(notificationUUID: request.notificationUUID, outcome: outcome, detail: detail, at: context.now())
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
        switch request.store {
        case .appstore: break
        case .appcoins, .googleplay, .stripe: return unanswered(.notAppStore, "only the App Store asks for consumption information")
        }
        guard context.now() < request.answerBy else { return unanswered(.pastDeadline, "the store stopped waiting at \(request.answerBy)") }
        guard request.ownershipType != "FAMILY_SHARED" else {
            return unanswered(.familyShared, "the App Store takes no consumption information for family-shared transactions")
        }
        guard let facts = try await store.consumptionFacts(key) else {
            return unanswered(.unknownPurchase, "the pipeline never recorded this transaction, so no user's consent applies")
        }
        switch try await store.consumptionDataConsent(of: facts.userId) {
        case nil: return unanswered(.noConsent, "user \(facts.userId) never consented to sharing consumption data")
        case false?: return unanswered(.consentWithdrawn, "user \(facts.userId) declined or withdrew consent")
        case true?: break
        }
        guard let appStoreAPIs else { return unanswered(.noAPICredentials, "the finisher has no App Store Server API credentials") }
        // The purchase's app and environment read only when there is a choice to make.
        let client: AppStoreServerAPIClient
        if appStoreAPIs.byApp.count == 1, let only = appStoreAPIs.byApp.first?.value, only.sandbox == nil {
            client = only.api
        } else {
            let record = try await store.purchase(key)
            guard let clients = appStoreAPIs.forRecorded(app: record?.app) else {
                return unanswered(.noAPICredentials, "the finisher has no App Store Server API credentials for app '\(record?.app.map(\.rawValue) ?? "")'")
            }
            client = clients.client(forRecorded: record?.environment)
        }
        let consumption = Self.consumption(of: facts, sampleContentProvided: sampleContentProvided)
        switch await client.sendConsumptionInformation(request.transactionId, consumption) {
        case .success:
            return ("sent", "deliveryStatus \(consumption.deliveryStatus.rawValue), consumptionPercentage \(consumption.consumptionPercentage.map(String.init) ?? "none")")
        case .failure(.unavailable(let why, let retryAfter)) where context.now() < request.answerBy: throw TransientError(why, retryAfter: retryAfter)
        case .failure(.unavailable(let why, _)): return unanswered(.pastDeadline, "the API did not answer before the deadline: \(why)")
        case .failure(.refused(let status, let detail)): return unanswered(.refusedByStore, status == 0 ? detail : "HTTP \(status): \(detail)")
        }
    }

    /// What the store knows, as the API asks it: delivered once granted (whatever happened since); a consumable is
    /// wholly consumed once the app (or the store) reported it consumed, not at all before — finishing a purchase
    /// with the store is not consumption; how much of an entitlement was used the pipeline cannot tell, so it
    /// claims no share (the API takes none for auto-renewable subscriptions, nor for a type it does not know).
    static func consumption(of facts: ConsumptionFacts, sampleContentProvided: Bool) -> ConsumptionRequest {
        let percentage: Int?
        switch facts.productType {
        case .consumable where facts.delivered: percentage = facts.consumed ? 100_000 : 0
        case .consumable, .nonConsumable, .nonRenewing: percentage = facts.delivered ? nil : 0
        case .autoRenewable, .unknown: percentage = nil
        }
        return ConsumptionRequest(customerConsented: true, deliveryStatus: facts.delivered ? .delivered : .undeliveredOther,
                                  sampleContentProvided: sampleContentProvided, consumptionPercentage: percentage)
    }
}

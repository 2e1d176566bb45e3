import Foundation
import PurchaseDomain

/// What is known about consumption: the app's reports, each user's consent to share consumption data, and the answers
/// to the store's consumption requests, as `SQLPurchaseStore+Consumption` keeps them.
extension Tables {
    /// The first report stands; a purchase not recorded yet keeps it until its record takes it.
    mutating func recordConsumed(_ key: PurchaseKey, at: Date) -> ConsumptionReport {
        if purchases[key] != nil {
            if purchases[key]?.consumedAt == nil { purchases[key]?.consumedAt = at.milliseconds }
            return .withItsPurchase
        }
        if earlyConsumption[key] == nil { earlyConsumption[key] = at.milliseconds }
        return .beforeItsPurchase
    }

    mutating func pruneTakenConsumptionReports() -> Int {
        let taken = earlyConsumption.keys.filter { purchases[$0] != nil }
        for key in taken { earlyConsumption[key] = nil }
        return taken.count
    }

    func consumptionFacts(_ key: PurchaseKey) -> ConsumptionFacts? {
        purchases[key].map { row in
            ConsumptionFacts(userId: row.record.userId, productType: row.record.productType, state: row.state, delivered: row.grantedAt != nil,
                             consumed: row.knownConsumed)
        }
    }

    /// Kept unless a later decision is recorded; of two at the same time the refusal stands. Whether this one stands.
    mutating func recordConsent(userId: UserID, consumptionData: Bool, decidedAt: Date, now: Date) -> Bool {
        let at = min(decidedAt, now).milliseconds
        let decision = Consent(consumptionData: consumptionData, decidedAt: at)
        if let recorded = consents[userId] {
            if recorded.decidedAt < at || (recorded.decidedAt == at && !consumptionData) { consents[userId] = decision }
        } else {
            consents[userId] = decision
        }
        return consents[userId]?.consumptionData == consumptionData && consents[userId]?.decidedAt == at
    }

    mutating func claimConsumptionRequest(_ key: PurchaseKey, notificationUUID: String, at now: Date, staleAfter: TimeInterval) -> ConsumptionClaim {
        let id = NotificationID(notificationUUID), at = now.milliseconds
        guard let existing = consumptionAnswers[id] else {
            consumptionAnswers[id] = ConsumptionAnswerRow(key: key, outcome: ConsumptionAnswer.sending, claimedAt: at)
            return .claimed
        }
        guard existing.outcome == ConsumptionAnswer.sending else { return .answered(Self.answer(existing)) }
        guard at - existing.claimedAt >= Int64(staleAfter * 1000) else { return .inProgress }
        consumptionAnswers[id]?.claimedAt = at
        return .claimed
    }

    mutating func releaseConsumptionClaim(notificationUUID: String) {
        let id = NotificationID(notificationUUID)
        if consumptionAnswers[id]?.outcome == ConsumptionAnswer.sending { consumptionAnswers[id]?.claimedAt = 0 }
    }

    mutating func recordConsumptionAnswer(notificationUUID: String, outcome: String, detail: String?, at now: Date) {
        let id = NotificationID(notificationUUID)
        guard consumptionAnswers[id] != nil else { return }
        consumptionAnswers[id]?.outcome = outcome
        consumptionAnswers[id]?.detail = detail
        consumptionAnswers[id]?.answeredAt = now.milliseconds
    }

    static func answer(_ row: ConsumptionAnswerRow) -> ConsumptionAnswer {
        ConsumptionAnswer(outcome: row.outcome, detail: row.detail, answeredAt: row.answeredAt.map(Date.init(milliseconds:)))
    }
}

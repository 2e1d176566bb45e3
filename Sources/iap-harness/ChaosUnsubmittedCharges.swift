import JSON
import PipelineHarness
import PurchaseDomain
import PurchaseStore

/// When the chaos run's charges nobody submitted (`--unsubmitted`, a share of the App Store's consumable charges) are
/// announced by the store (`ONE_TIME_CHARGE`, lost like any notification and then read back from the history): with the
/// first notifications, before any submission, those without a token (a few refunded at the store since, unannounced);
/// each with a token once the purchase that bound the token was answered (granted, or refused because the store refunded
/// it first: recorded all the same), so that the verifier grants them as they arrive.
struct UnsubmittedChargePlan {
    let charges: UnsubmittedCharges
    /// Announced first.
    let early: [PurchaseInput.Purchase]
    private var waiting: [(charge: PurchaseInput.Purchase, binding: TransactionID)]

    init(_ charges: UnsubmittedCharges) {
        self.charges = charges
        early = charges.withoutToken + charges.refundedUnannounced.map(\.charge)
        waiting = charges.withToken
    }

    /// The charges with a token to announce now: those whose binding purchase is among `answered`.
    mutating func due(answered: Set<TransactionID>) -> [PurchaseInput.Purchase] {
        var due: [PurchaseInput.Purchase] = []
        waiting.removeAll { pending in
            guard answered.contains(pending.binding) else { return false }
            due.append(pending.charge)
            return true
        }
        return due
    }

    var allAnnounced: Bool { waiting.isEmpty }

    /// Whether `store` holds every charge as its story ends: with a token finished, without one flagged.
    func settled(in store: SQLPurchaseStore) async throws -> Bool {
        for (charge, _) in charges.withToken where try await store.purchase(charge.key)?.state != .finished { return false }
        for charge in charges.withoutToken where try await store.purchase(charge.key)?.state != .refundDue { return false }
        for (charge, _) in charges.refundedUnannounced where try await store.purchase(charge.key)?.state != .revoked { return false }
        return true
    }

    var summary: JSONValue {
        .object(["withToken": .integer(Int64(charges.withToken.count)),
                 "withoutToken": .integer(Int64(charges.withoutToken.count)),
                 "refundedUnannounced": .integer(Int64(charges.refundedUnannounced.count))])
    }
}

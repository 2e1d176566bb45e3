import Foundation
import PurchaseDomain
import PurchaseEvents
import WorkerRuntime

/// An operator's adjustment: checked against the catalogs (an item no product gives is a typo, not a new currency),
/// applied once by its id in one store transaction, answered with `user.adjusted`.
extension GranterStage {
    func adjust(_ request: UserAdjustment) async throws -> StageResult {
        let now = context.now()
        let outcome: AdjustmentOutcome
        if let unknown = (request.items ?? []).first(where: { !knownItems(of: $0.kind).contains($0.code) }) {
            // Codes are compared as bytes: one spelled otherwise than the catalog spells it (é as one scalar or two) is unknown.
            let spelled = knownItems(of: unknown.kind).first { $0.isOtherSpelling(of: unknown.code) }
            outcome = .refused(.unknownItem, detail: "no product of the catalog gives the \(unknown.kind.rawValue) '\(unknown.code)'"
                               + (spelled.map { ": \(unknown.code.quotedWithHex) is not the catalog's spelling \($0.quotedWithHex)" } ?? ""))
        } else if let adjustments = store as? any AdjustmentRepository {
            outcome = try await adjustments.adjust(request.adjustment, takeWhatIsLeft: adjustmentsTakeWhatIsLeft, at: now)
        } else {
            // Every store the workers open keeps adjustments; a repository that does not (a test's) says so.
            return .deadLetter(reason: "adjustmentsNotKept", detail: "this granter's store does not keep adjustments")
        }
        switch outcome {
        case .applied(let items, _, let shortfall):
            context.logger.info("adjusted", ["adjustmentId": request.adjustmentId, "userId": request.userId, "requestedBy": request.requestedBy,
                                             "items": items.count, "shortfall": "\(shortfall)"])
        case .alreadyApplied:
            context.logger.info("adjustment applied before", ["adjustmentId": request.adjustmentId])
        case .refused(let refusal, let detail):
            context.logger.warning("adjustment refused", ["adjustmentId": request.adjustmentId, "refusal": refusal.rawValue, "detail": detail])
        }
        return try context.messages([UserAdjusted(request, outcome: outcome, at: now)])
    }

    /// The currencies or entitlements some product of some app's catalog gives.
    private func knownItems(of kind: GrantItem.Kind) -> Set<ItemCode> {
        apps.apps.reduce(into: []) { known, app in known.formUnion(app.catalog?.itemCodes(kind) ?? []) }
    }
}

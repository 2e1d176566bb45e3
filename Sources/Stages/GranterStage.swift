import Foundation
import Kafka
import PurchaseEvents
import PurchaseStore
import WorkerRuntime

/// `iap-granter`: `purchase.verified` → the catalog → one transaction (ledger, balance or entitlement,
/// state `granted`) → `item.granted`; a purchase granted before answers `alreadyGranted: true` and changes
/// nothing. `purchase.revoked`, and `refund.due` when claw-back is on, reverse the grant.
public struct GranterStage: StoreBackedStage {
    public let name = "granter"
    public let topics: [String]
    let context: StageContext
    let store: SQLPurchaseStore
    let catalog: ProductCatalog
    let clawBackDueRefunds: Bool

    public init(context: StageContext, store: SQLPurchaseStore, catalog: ProductCatalog, clawBackDueRefunds: Bool) {
        self.context = context
        self.store = store
        self.catalog = catalog
        self.clawBackDueRefunds = clawBackDueRefunds
        self.topics = [context.codec.topic(.purchaseVerified), context.codec.topic(.purchaseRevoked), context.codec.topic(.refundDue)]
    }

    public func handle(_ message: KafkaMessage) async throws -> StageResult {
        switch message.topic {
        case topics[1]:
            switch context.codec.decode(message, as: PurchaseRevokedEvent.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let revoked): return try await reverse(PurchaseKey(store: revoked.store.rawValue, transactionId: revoked.transactionId), why: revoked.reason.rawValue)
            }
        case topics[2]:
            switch context.codec.decode(message, as: RefundDue.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let due):
                guard clawBackDueRefunds else { return .publish([]) }
                return try await reverse(PurchaseKey(store: due.store.rawValue, transactionId: due.transactionId), why: "refundDue")
            }
        default:
            switch context.codec.decode(message, as: PurchaseVerifiedEvent.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let verified): return try await grant(verified)
            }
        }
    }

    private func grant(_ verified: PurchaseVerifiedEvent) async throws -> StageResult {
        let key = PurchaseKey(store: verified.store.rawValue, transactionId: verified.transactionId)
        if verified.revocationDate != nil {
            // Refunded or revoked before it was granted: nothing to give.
            _ = try await store.revoke(key, at: context.now())
            return try rejected(verified, reason: "revoked", detail: "the store reports this transaction revoked")
        }
        guard let items = catalog.grants(productId: verified.productId, quantity: verified.quantity, expiresDate: verified.expiresDate) else {
            return try rejected(verified, reason: "unknownProduct", detail: "product '\(verified.productId)' is not in the catalog")
        }
        switch try await store.grant(key, items: items, at: context.now()) {
        case .granted(let ids):
            context.logger.info("granted", ["transactionId": verified.transactionId, "productId": verified.productId])
            return try context.messages([granted(verified, items: items, already: false, ledgerEntryId: ids.first)])
        case .alreadyGranted(let original):
            return try context.messages([granted(verified, items: original, already: true, ledgerEntryId: nil)])
        case .notGrantable(let state?):
            return try rejected(verified, reason: state == .refundDue ? "refundDue" : state.rawValue, detail: "purchase is \(state.rawValue)")
        case .notGrantable(nil):
            // The verifier records before it emits; a missing row means a store that lost it or is not the same one.
            throw TransientError("purchase \(key) is not in the store yet")
        }
    }

    private func granted(_ verified: PurchaseVerifiedEvent, items: [GrantItem], already: Bool, ledgerEntryId: Int64?) -> ItemGranted {
        ItemGranted(store: verified.store, transactionId: verified.transactionId, userId: verified.userId, productId: verified.productId,
                    quantity: verified.quantity,
                    items: items.map { GrantedItem(kind: $0.kind == .currency ? .currency : .entitlement, code: $0.code,
                                                   amount: $0.kind == .currency ? $0.amount : nil, expiresAt: $0.expiresAt) },
                    alreadyGranted: already, ledgerEntryId: ledgerEntryId, grantedAt: context.now())
    }

    private func rejected(_ verified: PurchaseVerifiedEvent, reason: String, detail: String) throws -> StageResult {
        try context.messages([PurchaseRejectedEvent(
            store: verified.store, transactionId: verified.transactionId, productId: verified.productId, userId: verified.userId,
            reason: reason, retryable: false, detail: detail, rejectedAt: context.now(), causeID: verified.eventID)])
    }

    private func reverse(_ key: PurchaseKey, why: String) async throws -> StageResult {
        let outcome = try await store.revoke(key, at: context.now())
        switch outcome {
        case .revoked(let shortfall) where !shortfall.isEmpty:
            // The balance stays at zero; what was spent already is recorded and flagged for operators.
            context.logger.warning("revoked with shortfall", ["transactionId": key.transactionId, "reason": why, "shortfall": "\(shortfall)"])
        case .revoked:
            context.logger.info("revoked", ["transactionId": key.transactionId, "reason": why])
        case .alreadyRevoked, .unknownPurchase:
            context.logger.info("revocation changed nothing", ["transactionId": key.transactionId, "outcome": "\(outcome)"])
        }
        return .publish([])
    }
}

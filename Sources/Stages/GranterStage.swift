import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import WorkerRuntime

/// `iap-granter`: `purchase.verified` → the catalog → one transaction (ledger, balance or entitlement,
/// state `granted`) → `item.granted`; a purchase granted before answers `alreadyGranted: true` and changes
/// nothing. `purchase.revoked` carries out the store's later decisions: REFUND and REVOKE reverse the grant (or
/// leave a tombstone for a purchase not seen yet), REFUND_REVERSED gives back once what the refund took
/// (`item.granted`, `reinstated`), EXPIRED and GRACE_PERIOD_EXPIRED end what the expired subscription period
/// gave. A subscription period verified again with a later expiry (RENEWAL_EXTENDED) lasts until then.
/// `refund.due`, when claw-back is on, reverses the grant. `user.adjustment` corrects a user's books by hand
/// (`GranterStage+Adjustments`).
public struct GranterStage: StoreBackedStage {
    public let name = "granter"
    public let topics: [String]
    let context: StageContext
    let store: any PurchaseRepository
    public var repository: any PurchaseRepository { store }
    /// The deployment's apps: the catalog of the app each purchase names.
    let apps: AppDirectory
    let clawBackDueRefunds: Bool
    /// Whether an adjustment's take beyond a balance takes what is left (recording the shortfall) rather than being refused.
    let adjustmentsTakeWhatIsLeft: Bool

    /// A granter of a deployment that names no apps: one catalog.
    public init(context: StageContext, store: any PurchaseRepository, catalog: ProductCatalog, clawBackDueRefunds: Bool) {
        self.init(context: context, store: store, apps: AppDirectory(unnamed: .init(id: AppDirectory.unnamedAppID, catalog: catalog)),
                  clawBackDueRefunds: clawBackDueRefunds)
    }

    public init(context: StageContext, store: any PurchaseRepository, apps: AppDirectory, clawBackDueRefunds: Bool, adjustmentsTakeWhatIsLeft: Bool = false) {
        self.context = context
        self.store = store
        self.apps = apps
        self.clawBackDueRefunds = clawBackDueRefunds
        self.adjustmentsTakeWhatIsLeft = adjustmentsTakeWhatIsLeft
        self.topics = [context.codec.topic(.purchaseVerified), context.codec.topic(.purchaseRevoked), context.codec.topic(.refundDue),
                       context.codec.topic(.userAdjustment)]
    }

    public func handle(_ message: KafkaMessage) async throws -> StageResult {
        switch context.codec.eventType(ofTopic: message.topic) {
        case .purchaseRevoked?:
            switch context.codec.decode(message, as: PurchaseRevokedEvent.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let revoked):
                let key = PurchaseKey(store: revoked.store, transactionId: revoked.transactionId)
                switch revoked.reason {
                case .REFUND, .REVOKE: return try await reverse(key, why: revoked.reason.rawValue, decidedAt: revoked.decidedAt, share: RefundShare.part(share: revoked.refundShare, units: revoked.refundedQuantity))
                case .REFUND_REVERSED: return try await reinstate(key, decidedAt: revoked.decidedAt)
                case .EXPIRED, .GRACE_PERIOD_EXPIRED:
                    // The period the notification names, not the whole subscription: it may be late, after a newer paid period.
                    let outcome = try await store.expireSubscription(key, at: context.now())
                    context.logger.info("subscription ended", ["transactionId": revoked.transactionId, "reason": revoked.reason.rawValue, "outcome": "\(outcome)"])
                    return .publish([])
                }
            }
        case .userAdjustment?:
            switch context.codec.decode(message, as: UserAdjustment.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let request): return try await adjust(request)
            }
        case .refundDue?:
            switch context.codec.decode(message, as: RefundDue.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let due):
                guard clawBackDueRefunds else { return .publish([]) }
                return try await reverse(PurchaseKey(store: due.store, transactionId: due.transactionId), why: "refundDue", onlyIfDue: true)
            }
        default:
            switch context.codec.decode(message, as: PurchaseVerifiedEvent.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let verified): return try await grant(verified)
            }
        }
    }

    /// One store transaction for the batch (see `handleInOneTransaction`), its purchases read ahead; each
    /// `purchase.verified` decoded once.
    public func handle(batch messages: [KafkaMessage]) async -> [Result<StageResult, any Error>] {
        var decoded: [Int64: PurchaseVerifiedEvent] = [:] // by offset (one partition's messages)
        for message in messages where context.codec.eventType(ofTopic: message.topic) == .purchaseVerified {
            if case .success(let verified) = context.codec.decode(message, as: PurchaseVerifiedEvent.self) { decoded[message.offset] = verified }
        }
        let keys = decoded.values.map { PurchaseKey(store: $0.store, transactionId: $0.transactionId) }
        return await handleInOneTransaction(messages, readingAhead: keys, withOwnersBalances: true) { message in
            if let verified = decoded[message.offset] { return try await grant(verified) }
            return try await handle(message)
        }
    }

    private func grant(_ verified: PurchaseVerifiedEvent) async throws -> StageResult {
        let key = PurchaseKey(store: verified.store, transactionId: verified.transactionId)
        // Refunded or revoked before it was granted: nothing to give. Unless that refund was reversed since (taken first).
        if let revocationDate = verified.revocationDate, try await store.revoke(key, decidedAt: revocationDate, at: context.now()) != .outdated {
            return try await rejected(verified, reason: RefusalReason.revoked.rawValue, detail: "the store reports this transaction revoked")
        }
        let catalog = apps.catalog(for: verified.app)
        guard let items = catalog?.grants(store: verified.store, productId: verified.productId, quantity: verified.quantity,
                                          purchaseDate: verified.purchaseDate, expiresDate: verified.expiresDate) else {
            let ofApp = verified.app.map { " of app '\($0)'" } ?? ""
            return try await rejected(verified, reason: "unknownProduct", detail: "product '\(verified.productId)' is not in the \(verified.store) catalog\(ofApp)")
        }
        let type = verified.productType.flatMap(ProductType.init(rawValue:)) ?? catalog?.product(verified.store, verified.productId)?.type ?? .unknown
        let outcome: GrantOutcome
        do {
            outcome = try await store.grant(key, items: items, at: context.now())
        } catch let refusal as BalanceOutOfRange {
            // Nothing was written: the purchase stays verified (never granted, so its refund falls due) and the batch goes on.
            return try await rejected(verified, reason: BalanceOutOfRange.reason, detail: refusal.description)
        }
        switch outcome {
        case .granted(let ids, let balances, let endsBy, let ended):
            context.logger.debug("granted", ["transactionId": verified.transactionId, "productId": verified.productId])
            // A subscription period an upgrade granted before it replaced: what it gives ends at the upgrade.
            let given = endsBy.map { end in items.map { $0.ending(by: end) } } ?? items
            return try context.messages([granted(verified, type: type, items: given, balances: balances, already: false, ledgerEntryId: ids.first)]
                                        + ended.map(endedByUpgrade))
        case .alreadyGranted(let original, let balances, let ended):
            // A subscription period signed again with a later expiry (RENEWAL_EXTENDED): the entitlement lasts until then.
            if type == .autoRenewable, let expiresDate = verified.expiresDate,
               case .extended(let entitlements, let until) = try await store.extendSubscription(key, to: expiresDate, at: context.now()) {
                context.logger.info("subscription extended", ["transactionId": verified.transactionId, "entitlements": entitlements.map(\.rawValue).joined(separator: ",")])
                var answer = granted(verified, type: type, items: original.map { $0.lasting(until: until) }, balances: balances, already: true,
                                     ledgerEntryId: nil)
                answer.extendedUntil = until
                return try context.messages([answer] + ended.map(endedByUpgrade))
            }
            return try context.messages([granted(verified, type: type, items: original, balances: balances, already: true, ledgerEntryId: nil)]
                                        + ended.map(endedByUpgrade))
        case .notGrantable(let state?):
            if let expiresDate = verified.expiresDate, !Lifecycle.transition(from: state, on: .renewalExtended, type: type).effects.isEmpty {
                // An extension decided before the refund that revoked the period: kept for the refund's reversal.
                _ = try await store.extendSubscription(key, to: expiresDate, at: context.now())
            }
            let reason = Lifecycle.transition(from: state, on: .grant, type: type).reason ?? .rejected
            return try await rejected(verified, reason: reason.rawValue, detail: "purchase is \(state.rawValue)")
        case .notGrantable(nil):
            // The verifier records before it emits; a missing row means a store that lost it or is not the same one.
            throw TransientError("purchase \(key.logged) is not in the store yet")
        }
    }

    private func granted(_ verified: PurchaseVerifiedEvent, type: ProductType, items: [GrantItem], balances: [ItemCode: Int64], already: Bool,
                         ledgerEntryId: Int64?) -> ItemGranted {
        ItemGranted(store: verified.store, transactionId: verified.transactionId, userId: verified.userId, productId: verified.productId,
                    productType: type.rawValue, quantity: verified.quantity, items: items.map { GrantedItem($0, balances: balances) },
                    alreadyGranted: already, ledgerEntryId: ledgerEntryId, grantedAt: context.now(), app: verified.app)
    }

    /// What the holder of a subscription period an upgrade ended is told: its items, ending at the upgrade's start.
    private func endedByUpgrade(_ period: EndedPeriod) -> ItemGranted {
        ItemGranted(store: period.key.store, transactionId: period.key.transactionId, userId: period.userId, productId: period.productId,
                    productType: ProductType.autoRenewable.rawValue, quantity: period.quantity, items: period.items.map { GrantedItem($0, balances: [:]) },
                    alreadyGranted: true, grantedAt: context.now(), endedAt: period.endedAt)
    }

    /// REFUND_REVERSED: what the refund took back, given back (or the catalog's items for a purchase revoked before its grant;
    /// with none, or nobody's, it goes back to where its refund found it: `ReinstateOutcome.returned`).
    private func reinstate(_ key: PurchaseKey, decidedAt: Date?) async throws -> StageResult {
        guard let record = try await store.purchase(key) else {
            let outcome = try await store.reinstate(key, items: [], decidedAt: decidedAt, at: context.now())
            context.logger.info("refund reversed before the purchase was seen", ["transactionId": key.transactionId, "outcome": "\(outcome)"])
            return .publish([])
        }
        // Given back to its owner, it is announced in `item.granted`, whose schema bounds the quantity: a purchase recorded with
        // another (a charge the store signed so, claimed since) is refused before anything is written, for an operator to settle.
        if record.owner != nil, !ItemGranted.quantities.contains(record.quantity) {
            return .deadLetter(reason: "quantityOutOfRange",
                               detail: "giving back \(key) refused: its quantity \(record.quantity) is not within \(ItemGranted.quantities)")
        }
        // Used when it was revoked before its grant: until the expiry recorded at verification. A subscription recorded before
        // expiries were kept (migration 11) has none, and is never given for good: its next period's grant gives it.
        let catalog = apps.catalog(for: record.app)
        var items = catalog?.grants(store: key.store, productId: record.productId, quantity: record.quantity, purchaseDate: record.purchaseTime,
                                    expiresDate: record.expiresDate) ?? []
        if record.expiresDate == nil, catalog?.product(key.store, record.productId)?.type == .autoRenewable { items.removeAll { $0.kind == .entitlement } }
        let outcome: ReinstateOutcome
        do {
            outcome = try await store.reinstate(key, items: items, decidedAt: decidedAt, at: context.now())
        } catch let refusal as BalanceOutOfRange {
            // Nothing was written: the purchase stays revoked, for an operator to settle (`iapctl dlq`).
            return .deadLetter(reason: BalanceOutOfRange.reason, detail: "giving back \(key) refused: \(refusal)")
        }
        switch outcome {
        case .reinstated(let granted, let ids, let balances, let ended):
            context.logger.info("refund reversed: granted again", ["transactionId": key.transactionId])
            return try context.messages([ItemGranted(
                store: key.store, transactionId: key.transactionId, userId: record.userId, productId: record.productId, productType: record.productType.rawValue,
                quantity: record.quantity, items: granted.map { GrantedItem($0, balances: balances) }, alreadyGranted: false, reinstated: true,
                ledgerEntryId: ids.first, grantedAt: context.now())] + ended.map(endedByUpgrade))
        case .returned(let state):
            // Never granted: nothing is given, so nothing is announced or finished (`RefundReversal`).
            context.logger.info("refund reversed: never granted, put back", ["transactionId": key.transactionId, "state": state.rawValue])
            return .publish([])
        case .tombstoneCleared, .notRevoked:
            return .publish([])
        case .outdated:
            context.logger.info("refund reversal outdated: refunded again since", ["transactionId": key.transactionId])
            return .publish([])
        }
    }

    /// `purchase.rejected`, kept for the user's history too (with the batch's other writes).
    private func rejected(_ verified: PurchaseVerifiedEvent, reason: String, detail: String) async throws -> StageResult {
        try await context.messages([PurchaseRejectedEvent(
            store: verified.store, transactionId: verified.transactionId, productId: verified.productId, userId: verified.userId,
            reason: reason, retryable: false, detail: detail, rejectedAt: context.now(), causeID: verified.eventID)], keepingRejectionsIn: store)
    }

    private func reverse(_ key: PurchaseKey, why: String, decidedAt: Date? = nil, onlyIfDue: Bool = false, share: RefundShare.Part? = nil) async throws -> StageResult {
        let outcome = try await store.revoke(key, decidedAt: decidedAt, onlyIfDue: onlyIfDue, share: share, at: context.now())
        switch outcome {
        case .revoked(let shortfall) where !shortfall.isEmpty:
            // The balance stays at zero; what was spent already is recorded and flagged for operators.
            context.logger.warning("revoked with shortfall", ["transactionId": key.transactionId, "reason": why, "shortfall": "\(shortfall)"])
        case .revoked:
            context.logger.info("revoked", ["transactionId": key.transactionId, "reason": why])
        case .alreadyRevoked, .recordedBeforePurchase, .notRevocable, .outdated:
            context.logger.info("revocation changed nothing", ["transactionId": key.transactionId, "outcome": "\(outcome)"])
        }
        return .publish([])
    }
}

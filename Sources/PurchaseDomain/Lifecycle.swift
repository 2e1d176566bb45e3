/// Something that happens to a purchase, whatever its source (a verdict, a stage, the sweeper, a notification).
public enum LifecycleEvent: Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// The store proved the payment (a first submission, a duplicate or a restore by the same user).
    case verified
    /// The store announced a charge (a notification) that no user is known for: no submission named it, and its account
    /// token, if any, is nobody's the pipeline knows.
    case chargeAnnounced
    /// Verification refused a submission whose transaction the store's signed data names (a wrong app or environment):
    /// recorded for audit, never granted. Never from an id an unverified payload claims: a forgery must not take the
    /// place of the real purchase.
    case verificationRefused
    /// The granter asks to give the purchase's items.
    case grant
    /// Completed with the store: finished through its API, consumed in the app, or reported consumed by the store.
    case finish
    /// The store's consume deadline passed while the purchase was not finished.
    case deadlinePassed
    /// REFUND or REVOKE from the store.
    case revoke
    /// A due refund clawed back (`refund.due`, with claw-back on): from a purchase still flagged only. Its event can come
    /// late, after the store refunded the purchase, or refunded it and reversed the refund: what was learned since stands.
    case clawBack
    /// REFUND_REVERSED: the store took the refund back; the customer keeps what was bought. What that means for a revoked
    /// purchase depends on what its refund took (`RefundReversal`): the store tells, as it alone knows its ledger.
    case refundReversed(RefundReversal)
    /// REFUND_DECLINED: the store refused the customer's refund request.
    case refundDeclined
    /// EXPIRED or GRACE_PERIOD_EXPIRED: the subscription period this purchase paid for ended; its entitlement ends.
    case expire
    /// RENEWAL_EXTENDED: the store moved the renewal date of the period this purchase paid for (a compensation); its
    /// entitlement lasts until the later expiry.
    case renewalExtended
    /// The purchase is restored by a user other than its owner, under the operator's restore policy.
    case restoreByAnotherUser(RestorePolicy)

    public static let allCases: [LifecycleEvent] = [.verified, .chargeAnnounced, .verificationRefused, .grant, .finish, .deadlinePassed, .revoke, .clawBack]
        + RefundReversal.allCases.map(LifecycleEvent.refundReversed) + [.refundDeclined, .expire, .renewalExtended, .restoreByAnotherUser(.transfer), .restoreByAnotherUser(.keep)]

    /// The event's name, without the case of it (`caseName`).
    public var name: String {
        if case .refundReversed = self { return "refund reversed" }
        return description
    }

    /// Which case of an event that has several (a refund's reversal), as the lifecycle table names it.
    public var caseName: String? {
        if case .refundReversed(let reversal) = self { return reversal.rawValue }
        return nil
    }

    public var description: String {
        switch self {
        case .verified: "verified"
        case .chargeAnnounced: "charge announced, no user known"
        case .verificationRefused: "verification refused"
        case .grant: "grant"
        case .finish: "finish"
        case .deadlinePassed: "deadline passed"
        case .revoke: "refund / revoke"
        case .clawBack: "due refund clawed back"
        case .refundReversed(let reversal): "refund reversed (\(reversal.rawValue))"
        case .refundDeclined: "refund declined"
        case .expire: "expired"
        case .renewalExtended: "renewal extended"
        case .restoreByAnotherUser(let policy): "restore by another user (\(policy.rawValue))"
        }
    }
}

/// What the refund a store reversed had taken from a revoked purchase: its reversal gives that back, and a purchase
/// refunded before its grant goes on from where it was then. Rule 1 holds either way: nothing is finished that was not
/// granted, and nothing is granted to nobody.
public enum RefundReversal: String, Hashable, Sendable, CaseIterable {
    /// It was granted before its refund: what the refund took back is given back, and it is finished.
    case afterGrant
    /// Refunded before its grant, owned by a user, with the catalog's items to give: the reversal is its grant.
    case beforeGrant
    /// Refunded before its grant, owned by a user, with nothing to give (its product unknown to the catalog): verified
    /// again, never granted, as its grant's refusal left it (its refund falls due at its deadline).
    case beforeGrantNothingToGive
    /// A charge nobody claimed, refunded: unclaimed again, to be claimed by its submission or flagged at its deadline.
    case unclaimed

    /// The reversal of the refund of a purchase owned by `owner` (nil: nobody's) whose refund took back grants
    /// (`tookBackGrants`: it was granted) or not, and that `hasItemsToGive` (what the refund took, else the catalog's).
    public init(owner: UserID?, tookBackGrants: Bool, hasItemsToGive: Bool) {
        if owner == nil {
            self = .unclaimed
        } else if tookBackGrants {
            self = .afterGrant
        } else {
            self = hasItemsToGive ? .beforeGrant : .beforeGrantNothingToGive
        }
    }
}

/// What happens when an entitlement is restored under another user id (a new install of an app without login).
public enum RestorePolicy: String, Codable, Sendable, Hashable, CaseIterable {
    /// The entitlement moves to the restoring user (one owner at a time).
    case transfer
    /// It stays with the first user; the restore is answered with who owns it.
    case keep
}

/// What a transition asks the store (the repository) to do, in the same transaction as the state change.
public enum LifecycleEffect: String, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// Create the purchase record (in the transition's target state).
    case recordPurchase
    /// Give an unclaimed purchase the user of the submission that claims it.
    case claimPurchase
    /// Remember that the store refunded or revoked a transaction the pipeline has not seen.
    case recordTombstone
    /// Forget that tombstone: the refund was reversed.
    case clearTombstone
    /// Ledger entries, balance or entitlement for the purchase's items.
    case grantItems
    /// Give back what the refund took back (not what was spent before it), after a reversed refund.
    case regrantItems
    /// Take back what the purchase granted (never below zero: what was spent is the shortfall).
    case reverseGrants
    /// Mark it due for refund and queue `refund.due` (the outbox).
    case flagRefundDue
    /// The purchase's entitlement ends now.
    case endEntitlement
    /// The purchase's entitlement lasts until a later expiry.
    case extendEntitlement
    /// Remember a later expiry of a revoked subscription period, for its refund's reversal to give back.
    case recordExpiry
    /// The purchase's entitlement moves to the restoring user.
    case transferEntitlement

    public var description: String { rawValue }
}

/// How an event was taken, for the stage to answer with.
public enum LifecycleOutcome: String, Hashable, Sendable, CaseIterable {
    /// The event moved the purchase (or took effect on it).
    case applied
    /// The event happened before: nothing changes ("already granted", "already finished", "already revoked").
    case repeated
    /// It may apply later: the event overtook the purchase (a grant or a consumption report before the purchase).
    case waiting
    /// Never in this state (the state is the reason): e.g. finishing what was not granted, granting what was revoked.
    case refused
    /// Nothing to do for this product type in this state (e.g. a deadline for a non-consumable).
    case ignored
}

/// The purchase lifecycle: for a state, an event and the product type, the next state, the effects and the outcome.
public struct Transition: Hashable, Sendable, CustomStringConvertible {
    public var to: PurchaseState
    public var effects: [LifecycleEffect]
    public var outcome: LifecycleOutcome
    /// Why the event was refused: set exactly when `outcome` is `refused`.
    public var reason: RefusalReason?

    public init(to: PurchaseState, effects: [LifecycleEffect] = [], outcome: LifecycleOutcome, reason: RefusalReason? = nil) {
        self.to = to
        self.effects = effects
        self.outcome = outcome
        self.reason = reason
    }

    public var description: String { "→ \(to) \(effects) (\(outcome.rawValue)\(reason.map { ": \($0.rawValue)" } ?? ""))" }
}

/// Why the lifecycle refused an event; the raw value is the `reason` of the `purchase.rejected` (or dead letter) that
/// answers it.
public enum RefusalReason: String, Codable, Sendable, Hashable, CaseIterable {
    /// Verification refused the purchase: nothing of it is granted.
    case rejected
    /// The store refunded or revoked it (the refund may have come first).
    case revoked
    /// It was flagged at its deadline, unconsumed: the store refunds it.
    case refundDue
    /// It was never granted, so it is never finished (rule 1).
    case notGranted
    /// An entitlement another user holds, under the `keep` restore policy.
    case ownedByAnotherUser
    /// A consumable (or a purchase no longer in force) submitted by a user other than its owner: never granted twice.
    case transactionOfAnotherUser

    /// Why a restore by another user is refused: the `keep` policy keeps an entitlement with its owner; anything else
    /// (a consumable, a purchase no longer in force under `transfer`) is a transaction of another user.
    static func restoreRefusal(type: ProductType, policy: RestorePolicy) -> RefusalReason {
        type.isEntitlement && policy == .keep ? .ownedByAnotherUser : .transactionOfAnotherUser
    }

    /// Why a purchase in `state` is not granted.
    static func notGrantable(_ state: PurchaseState) -> RefusalReason {
        switch state {
        case .refundDue: .refundDue
        case .revoked, .revokedUnseen: .revoked
        case .unseen, .unclaimed, .verified, .granted, .finished, .rejected: .rejected
        }
    }
}

/// The one place that decides what an event means for a purchase. No I/O: the store applies the effects in the
/// transaction that changes the state, so a decision and its effects happen together or not at all.
public enum Lifecycle {
    public static func transition(from state: PurchaseState, on event: LifecycleEvent, type: ProductType) -> Transition {
        let unchanged = { (outcome: LifecycleOutcome) in Transition(to: state, outcome: outcome) }
        let refused = { (reason: RefusalReason) in Transition(to: state, outcome: .refused, reason: reason) }
        switch (event, state) {
        case (.verified, .unseen): return Transition(to: .verified, effects: [.recordPurchase], outcome: .applied)
        // The refund came first: the purchase is recorded revoked and never granted.
        case (.verified, .revokedUnseen): return Transition(to: .revoked, effects: [.recordPurchase], outcome: .refused, reason: .revoked)
        // The store announced it first: the first submission claims it, and it goes on as if it had come first.
        case (.verified, .unclaimed): return Transition(to: .verified, effects: [.claimPurchase], outcome: .applied)
        case (.verified, _): return unchanged(.repeated)

        // Paid, and nobody to give it to yet: kept until a submission claims it, and flagged at its deadline if none does.
        case (.chargeAnnounced, .unseen): return Transition(to: .unclaimed, effects: [.recordPurchase], outcome: .applied)
        case (.chargeAnnounced, .revokedUnseen): return Transition(to: .revoked, effects: [.recordPurchase], outcome: .refused, reason: .revoked)
        case (.chargeAnnounced, _): return unchanged(.repeated)

        case (.verificationRefused, .unseen): return Transition(to: .rejected, effects: [.recordPurchase], outcome: .applied)
        // What is recorded stands: a refusal never replaces a proven purchase, nor a refund that came first.
        case (.verificationRefused, _): return unchanged(.ignored)

        case (.grant, .verified): return Transition(to: .granted, effects: [.grantItems], outcome: .applied)
        case (.grant, .granted), (.grant, .finished): return unchanged(.repeated)
        case (.grant, .unseen), (.grant, .unclaimed): return unchanged(.waiting)
        case (.grant, _): return refused(.notGrantable(state))

        case (.finish, .granted): return Transition(to: .finished, outcome: .applied)
        case (.finish, .finished): return unchanged(.repeated)
        // A consumption report can overtake the grant: it waits for it.
        case (.finish, .unseen), (.finish, .unclaimed), (.finish, .verified): return unchanged(.waiting)
        case (.finish, _): return refused(.notGranted)

        case (.deadlinePassed, .unclaimed) where type.isFlaggedWhenUnconsumed, (.deadlinePassed, .verified) where type.isFlaggedWhenUnconsumed,
             (.deadlinePassed, .granted) where type.isFlaggedWhenUnconsumed:
            return Transition(to: .refundDue, effects: [.flagRefundDue], outcome: .applied)
        case (.deadlinePassed, _): return unchanged(.ignored)

        case (.revoke, .unseen): return Transition(to: .revokedUnseen, effects: [.recordTombstone], outcome: .applied)
        case (.revoke, .unclaimed), (.revoke, .verified): return Transition(to: .revoked, outcome: .applied)
        case (.revoke, .granted), (.revoke, .finished), (.revoke, .refundDue):
            return Transition(to: .revoked, effects: [.reverseGrants], outcome: .applied)
        case (.revoke, .revoked), (.revoke, .revokedUnseen): return unchanged(.repeated)
        case (.revoke, .rejected): return unchanged(.ignored)

        case (.clawBack, .refundDue): return Transition(to: .revoked, effects: [.reverseGrants], outcome: .applied)
        case (.clawBack, .revoked): return unchanged(.repeated)
        case (.clawBack, _): return unchanged(.ignored)

        // The store keeps the money: the customer keeps the items, and nothing is left to finish or flag.
        case (.refundReversed(.afterGrant), .revoked), (.refundReversed(.beforeGrant), .revoked):
            return Transition(to: .finished, effects: [.regrantItems], outcome: .applied)
        // Never granted and nothing to grant, or nobody to grant it to: back to where the refund found it, never finished.
        case (.refundReversed(.beforeGrantNothingToGive), .revoked): return Transition(to: .verified, outcome: .applied)
        case (.refundReversed(.unclaimed), .revoked): return Transition(to: .unclaimed, outcome: .applied)
        case (.refundReversed, .revokedUnseen): return Transition(to: .unseen, effects: [.clearTombstone], outcome: .applied)
        case (.refundReversed, _): return unchanged(.ignored)

        case (.refundDeclined, _): return unchanged(.ignored)

        case (.expire, .granted) where type.isEntitlement && type != .nonConsumable, (.expire, .finished) where type.isEntitlement && type != .nonConsumable:
            return Transition(to: state, effects: [.endEntitlement], outcome: .applied)
        case (.expire, _): return unchanged(.ignored)

        // Never earlier (an older copy of the transaction changes nothing), never a period that ended (the store extends
        // active subscriptions only), and only what the grant gave: a purchase not granted yet is granted with the later date.
        // A revoked period keeps the date for its refund's reversal (the refund may be decided after the extension).
        case (.renewalExtended, .granted) where type == .autoRenewable, (.renewalExtended, .finished) where type == .autoRenewable:
            return Transition(to: state, effects: [.extendEntitlement], outcome: .applied)
        case (.renewalExtended, .revoked) where type == .autoRenewable: return Transition(to: state, effects: [.recordExpiry], outcome: .applied)
        case (.renewalExtended, _): return unchanged(.ignored)

        case (.restoreByAnotherUser(let policy), .verified), (.restoreByAnotherUser(let policy), .granted),
             (.restoreByAnotherUser(let policy), .finished):
            // Consumables are never granted twice; an entitlement has one owner at a time.
            guard type.isEntitlement, policy == .transfer else { return refused(.restoreRefusal(type: type, policy: policy)) }
            return Transition(to: state, effects: [.transferEntitlement], outcome: .applied)
        case (.restoreByAnotherUser, .unseen), (.restoreByAnotherUser, .unclaimed): return unchanged(.ignored)
        case (.restoreByAnotherUser(let policy), _): return refused(.restoreRefusal(type: type, policy: policy))
        }
    }
}

import Foundation
import PurchaseDomain
import Testing

/// The lifecycle, exhaustively over state × event × product type: no broker, no database.
@Suite struct LifecycleTests {
    typealias Case = (state: PurchaseState, event: LifecycleEvent, type: ProductType, transition: Transition)

    /// Every (state, event, type) and what the lifecycle says of it.
    static let everyCase: [Case] = PurchaseState.allCases.flatMap { state in
        LifecycleEvent.allCases.flatMap { event in
            ProductType.allCases.map { type in (state, event, type, Lifecycle.transition(from: state, on: event, type: type)) }
        }
    }

    static let moneyEffects: Set<LifecycleEffect> = [.recordPurchase, .grantItems, .regrantItems, .reverseGrants, .flagRefundDue]

    @Test func theTableCoversEveryStateEventAndType() {
        #expect(Self.everyCase.count == PurchaseState.allCases.count * LifecycleEvent.allCases.count * ProductType.allCases.count)
        #expect(Self.everyCase.count == 9 * 17 * 5)
    }

    /// A due refund's claw-back takes back only from a purchase still flagged: one refunded since (revoked), or whose
    /// refund was reversed since (finished again), stays as the store's decisions left it.
    @Test func aClawBackTakesOnlyFromAPurchaseStillDue() {
        for c in Self.everyCase where c.event == .clawBack {
            switch c.state {
            case .refundDue: #expect(c.transition == Transition(to: .revoked, effects: [.reverseGrants], outcome: .applied), "\(c)")
            case .revoked: #expect(c.transition == Transition(to: .revoked, outcome: .repeated), "\(c)")
            default: #expect(c.transition == Transition(to: c.state, outcome: .ignored), "\(c)")
            }
        }
    }

    @Test func anOutcomeIsAppliedExactlyWhenSomethingChanges() {
        for c in Self.everyCase {
            let changes = c.transition.to != c.state || !c.transition.effects.isEmpty
            // A purchase recorded revoked because its refund came first is a refusal that still records it.
            let refusedButRecorded = c.transition.outcome == .refused && c.transition.effects == [.recordPurchase]
            #expect(changes == (c.transition.outcome == .applied) || refusedButRecorded, "\(c)")
        }
    }

    @Test func nothingIsFinishedThatWasNotGranted() {
        for c in Self.everyCase where c.transition.to == .finished && c.state != .finished {
            #expect(c.state == .granted || c.transition.effects.contains(.regrantItems), "\(c)")
        }
    }

    @Test func itemsAreGrantedOnlyFromVerifiedOrAfterAReversedRefund() {
        for c in Self.everyCase where c.transition.effects.contains(.grantItems) {
            #expect(c.state == .verified && c.event == .grant && c.transition.to == .granted, "\(c)")
        }
        for c in Self.everyCase where c.transition.effects.contains(.regrantItems) {
            #expect(c.state == .revoked && [.refundReversed(.afterGrant), .refundReversed(.beforeGrant)].contains(c.event), "\(c)")
        }
    }

    @Test func onlyConsumablesAreEverFlagged() {
        let flagged = Self.everyCase.filter { $0.transition.effects.contains(.flagRefundDue) }
        #expect(!flagged.isEmpty)
        for c in flagged {
            #expect(c.type == .consumable && c.event == .deadlinePassed && [.unclaimed, .verified, .granted].contains(c.state) && c.transition.to == .refundDue,
                    "\(c)")
        }
        for c in Self.everyCase where c.event == .deadlinePassed && c.type != .consumable {
            #expect(c.transition == Transition(to: c.state, outcome: .ignored), "a \(c.type) is never flagged: \(c)")
        }
    }

    @Test func aRepeatedEventHasNoMoneyEffect() {
        for c in Self.everyCase where c.transition.outcome == .applied && !Self.moneyEffects.isDisjoint(with: c.transition.effects) {
            let again = Lifecycle.transition(from: c.transition.to, on: c.event, type: c.type)
            #expect(Self.moneyEffects.isDisjoint(with: again.effects), "\(c) then again \(again)")
        }
    }

    @Test func rejectedPurchasesGetNothing() {
        for c in Self.everyCase where c.state == .rejected {
            #expect(c.transition.to == .rejected && c.transition.effects.isEmpty, "\(c)")
            #expect(c.transition.outcome != .applied, "\(c)")
        }
    }

    @Test func entitlementEffectsOnlyForEntitlementTypes() {
        for c in Self.everyCase where c.transition.effects.contains(.transferEntitlement) || c.transition.effects.contains(.endEntitlement) {
            #expect(c.type.isEntitlement, "\(c)")
        }
        for c in Self.everyCase where c.transition.effects.contains(.endEntitlement) {
            #expect([.autoRenewable, .nonRenewing].contains(c.type), "a non-consumable never expires: \(c)")
        }
        for c in Self.everyCase where c.transition.effects.contains(.transferEntitlement) {
            #expect(c.event == .restoreByAnotherUser(.transfer), "\(c)")
        }
        // Only a subscription period that is in force is extended: not a pass, not one revoked, not one not granted yet.
        let extended = Self.everyCase.filter { $0.transition.effects.contains(.extendEntitlement) }
        #expect(!extended.isEmpty)
        for c in extended {
            #expect(c.event == .renewalExtended && c.type == .autoRenewable && [.granted, .finished].contains(c.state) && c.transition.to == c.state, "\(c)")
        }
        for c in Self.everyCase where c.transition.effects.contains(.recordExpiry) {
            #expect(c.event == .renewalExtended && c.type == .autoRenewable && c.state == .revoked && c.transition.to == .revoked, "\(c)")
        }
        for c in Self.everyCase where c.event == .restoreByAnotherUser(.keep) {
            #expect(c.transition.effects.isEmpty, "keep never moves anything: \(c)")
        }
        // An unclaimed charge has no owner to restore it from: its submission claims it.
        for c in Self.everyCase where c.event == .restoreByAnotherUser(.transfer) && c.state.isRecorded && c.state != .unclaimed && !c.type.isEntitlement {
            #expect(c.transition.outcome == .refused, "a consumable is never granted again: \(c)")
        }
    }

    @Test func tombstonesComeOnlyFromARefundOfAnUnseenPurchase() {
        for c in Self.everyCase where c.transition.to == .revokedUnseen && c.state != .revokedUnseen {
            #expect(c.state == .unseen && c.event == .revoke && c.transition.effects == [.recordTombstone], "\(c)")
        }
        for c in Self.everyCase where c.transition.to == .unseen && c.state != .unseen {
            #expect(c.state == .revokedUnseen && RefundReversal.allCases.map(LifecycleEvent.refundReversed).contains(c.event)
                    && c.transition.effects == [.clearTombstone], "\(c)")
        }
        // No purchase record is ever created except by a verdict (the store's proof, or a refusal of it) or the store's own
        // announcement of the charge.
        for c in Self.everyCase where !c.state.isRecorded && c.transition.to.isRecorded {
            #expect([.verified, .verificationRefused, .chargeAnnounced].contains(c.event) && c.transition.effects == [.recordPurchase], "\(c)")
        }
    }

    @Test func eventsThatOvertakeTheirPurchaseWait() {
        for type in ProductType.allCases {
            #expect(Lifecycle.transition(from: .unseen, on: .grant, type: type).outcome == .waiting)
            #expect(Lifecycle.transition(from: .unseen, on: .finish, type: type).outcome == .waiting)
            #expect(Lifecycle.transition(from: .verified, on: .finish, type: type).outcome == .waiting, "a consumption report before its grant")
        }
    }

    /// The walks the issue names, one product type at a time.
    @Test(arguments: ProductType.allCases) func walks(_ type: ProductType) {
        func walk(_ events: [LifecycleEvent], from start: PurchaseState = .unseen) -> (PurchaseState, [LifecycleOutcome]) {
            var state = start
            var outcomes: [LifecycleOutcome] = []
            for event in events {
                let transition = Lifecycle.transition(from: state, on: event, type: type)
                outcomes.append(transition.outcome)
                state = transition.to
            }
            return (state, outcomes)
        }
        // Paid, granted, finished; every repeat answers "already".
        #expect(walk([.verified, .grant, .finish, .verified, .grant, .finish]) == (.finished, [.applied, .applied, .applied, .repeated, .repeated, .repeated]))
        // Unconsumed past the deadline: only a consumable is flagged, and only once.
        let flagged = walk([.verified, .grant, .deadlinePassed, .deadlinePassed])
        #expect(flagged.0 == (type == .consumable ? .refundDue : .granted))
        // A refund before its purchase: recorded; the purchase then is refused and never granted.
        #expect(walk([.revoke, .verified, .grant]) == (.revoked, [.applied, .refused, .refused]))
        // Reversed before the purchase arrived: the purchase is then granted as usual.
        #expect(walk([.revoke, .refundReversed(.unclaimed), .verified, .grant]) == (.granted, [.applied, .applied, .applied, .applied]))
        // Refunded after the grant, then reversed: granted again once.
        let reversed = walk([.verified, .grant, .revoke, .refundReversed(.afterGrant), .refundReversed(.afterGrant)])
        #expect(reversed == (.finished, [.applied, .applied, .applied, .applied, .ignored]))
        // A declined refund changes nothing.
        #expect(walk([.verified, .grant, .refundDeclined]) == (.granted, [.applied, .applied, .ignored]))
    }
}

extension LifecycleTests {
    /// A charge the store announced with no user known is kept, owned by nobody, until the first submission claims it;
    /// meanwhile nothing is granted or finished, its refund ends it, and a consumable is flagged at its deadline.
    @Test func aChargeNobodyClaimedWaitsForItsSubmission() {
        for type in ProductType.allCases {
            #expect(Lifecycle.transition(from: .unseen, on: .chargeAnnounced, type: type) == Transition(to: .unclaimed, effects: [.recordPurchase], outcome: .applied))
            #expect(Lifecycle.transition(from: .revokedUnseen, on: .chargeAnnounced, type: type)
                    == Transition(to: .revoked, effects: [.recordPurchase], outcome: .refused, reason: .revoked), "its refund came first")
            #expect(Lifecycle.transition(from: .unclaimed, on: .verified, type: type) == Transition(to: .verified, effects: [.claimPurchase], outcome: .applied))
            #expect(Lifecycle.transition(from: .unclaimed, on: .chargeAnnounced, type: type).outcome == .repeated)
            #expect(Lifecycle.transition(from: .verified, on: .chargeAnnounced, type: type).outcome == .repeated, "submitted first: the announcement changes nothing")
            #expect(Lifecycle.transition(from: .unclaimed, on: .grant, type: type).outcome == .waiting)
            #expect(Lifecycle.transition(from: .unclaimed, on: .finish, type: type).outcome == .waiting)
            #expect(Lifecycle.transition(from: .unclaimed, on: .revoke, type: type) == Transition(to: .revoked, outcome: .applied), "nothing to take back")
            let deadline = Lifecycle.transition(from: .unclaimed, on: .deadlinePassed, type: type)
            #expect(deadline.effects.contains(.flagRefundDue) == (type == .consumable), "\(type)")
        }
        #expect(Lifecycle.dueStates.contains(.unclaimed) && !Lifecycle.openStates.contains(.unclaimed))
    }
}

extension LifecycleTests {
    /// A refund's reversal gives back what the refund took, or grants a purchase refunded before its grant; one never
    /// granted with nothing to give, or nobody to give it to, goes back to where its refund found it: never finished
    /// (rule 1), never granted to nobody.
    @Test func aReversedRefundOfAPurchaseNeverGrantedPutsItBack() {
        for type in ProductType.allCases {
            let regranted = Transition(to: .finished, effects: [.regrantItems], outcome: .applied)
            #expect(Lifecycle.transition(from: .revoked, on: .refundReversed(.afterGrant), type: type) == regranted)
            #expect(Lifecycle.transition(from: .revoked, on: .refundReversed(.beforeGrant), type: type) == regranted)
            #expect(Lifecycle.transition(from: .revoked, on: .refundReversed(.beforeGrantNothingToGive), type: type) == Transition(to: .verified, outcome: .applied))
            #expect(Lifecycle.transition(from: .revoked, on: .refundReversed(.unclaimed), type: type) == Transition(to: .unclaimed, outcome: .applied))
        }
        // Put back, it is where it was: an unknown product's purchase, verified, is refused its grant again and waits for its
        // deadline; a charge nobody claimed waits for its submission.
        for type in ProductType.allCases {
            #expect(Lifecycle.transition(from: .verified, on: .finish, type: type).outcome == .waiting)
            #expect(Lifecycle.transition(from: .unclaimed, on: .finish, type: type).outcome == .waiting)
            #expect(Lifecycle.transition(from: .unclaimed, on: .verified, type: type).effects == [.claimPurchase])
        }
        #expect(RefundReversal(owner: nil, tookBackGrants: false, hasItemsToGive: true) == .unclaimed, "nobody to give it to")
        #expect(RefundReversal(owner: "u", tookBackGrants: true, hasItemsToGive: false) == .afterGrant)
        #expect(RefundReversal(owner: "u", tookBackGrants: false, hasItemsToGive: true) == .beforeGrant)
        #expect(RefundReversal(owner: "u", tookBackGrants: false, hasItemsToGive: false) == .beforeGrantNothingToGive)
    }
}

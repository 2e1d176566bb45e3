import PurchaseDomain
import Testing

/// The state sets the store's queries select by hold together as the queries need them to: each is read off
/// `Lifecycle.transition`, and these are the relations between them that the sweeper's and the read side's queries and
/// their partial indexes rely on.
@Suite struct LifecycleStateSetsTests {
    @Test func everyDuePurchaseIsOpenOrUnclaimedAndEveryRecheckableOneIsDue() {
        #expect(!Lifecycle.dueStates.isEmpty && !Lifecycle.typesFlaggedAtDeadline.isEmpty)
        // The due queries read the index of open purchases, and that of unclaimed charges: a due purchase outside both
        // would never be flagged.
        #expect(Lifecycle.dueStates.allSatisfy { Lifecycle.openStates.contains($0) || $0 == .unclaimed })
        #expect(Lifecycle.recheckableStates.allSatisfy(Lifecycle.dueStates.contains))
        #expect(Lifecycle.awaitingFinishStates.allSatisfy(Lifecycle.openStates.contains), "a user's pending purchases come from the open ones")
    }

    /// A proven purchase has an owner; a refused verification never does, and only that event leads to its state; nor
    /// does a charge the store announced until a submission claims it.
    @Test func provenStatesAreThoseAProofLeadsTo() {
        let refused = Lifecycle.transition(from: .unseen, on: .verificationRefused, type: .consumable)
        #expect(refused.to == .rejected && refused.effects == [.recordPurchase])
        #expect(!Lifecycle.provenStates.contains(.rejected) && !Lifecycle.provenStates.contains(.unclaimed))
        #expect(Lifecycle.provenStates == PurchaseState.recorded.filter { $0 != .rejected && $0 != .unclaimed })
        for event in LifecycleEvent.allCases where event != .verificationRefused {
            for state in PurchaseState.allCases where state != .rejected {
                for type in ProductType.allCases {
                    #expect(Lifecycle.transition(from: state, on: event, type: type).to != .rejected, "\(event) from \(state) rejects a \(type)")
                }
            }
        }
        for state in PurchaseState.recorded {
            #expect(Lifecycle.transition(from: state, on: .verificationRefused, type: .consumable).to == state, "a refusal replaced a \(state) purchase")
        }
    }

    @Test func aFlaggedPurchaseIsNoLongerOpenAndIsFlaggedOnce() {
        #expect(!Lifecycle.openStates.contains(Lifecycle.flaggedState))
        for type in Lifecycle.typesFlaggedAtDeadline {
            let again = Lifecycle.transition(from: Lifecycle.flaggedState, on: .deadlinePassed, type: type)
            #expect(!again.effects.contains(.flagRefundDue), "a second deadline flags \(type) again")
        }
    }

    /// Each set against the rule it stands for, state by state and type by type.
    @Test(arguments: PurchaseState.recorded) func eachSetIsTheRuleItNames(_ state: PurchaseState) {
        let types = ProductType.allCases
        let grantOrFinish = types.contains { type in
            Lifecycle.transition(from: state, on: .grant, type: type).outcome == .applied
                || Lifecycle.transition(from: state, on: .finish, type: type).outcome == .applied
        }
        #expect(Lifecycle.openStates.contains(state) == grantOrFinish)
        let flagged = types.contains { Lifecycle.transition(from: state, on: .deadlinePassed, type: $0).effects.contains(.flagRefundDue) }
        #expect(Lifecycle.dueStates.contains(state) == flagged)
        let finishes = types.contains { Lifecycle.transition(from: state, on: .finish, type: $0).outcome == .applied }
        #expect(Lifecycle.awaitingFinishStates.contains(state) == finishes)
        #expect(Lifecycle.recheckableStates.contains(state) == (flagged && finishes))
    }

    @Test(arguments: ProductType.allCases) func onlyTypesTheDeadlineFlagsAreSwept(_ type: ProductType) {
        let flagged = PurchaseState.recorded.contains { Lifecycle.transition(from: $0, on: .deadlinePassed, type: type).effects.contains(.flagRefundDue) }
        #expect(Lifecycle.typesFlaggedAtDeadline.contains(type) == flagged)
        #expect(flagged == type.isFlaggedWhenUnconsumed, "the product type's own word and the lifecycle agree")
    }
}

/// A refusal says why, so a stage answers with the lifecycle's reason instead of working it out again.
@Suite struct RefusalReasonTests {
    @Test(arguments: PurchaseState.allCases) func everyRefusalAndOnlyARefusalCarriesAReason(_ state: PurchaseState) {
        for event in LifecycleEvent.allCases {
            for type in ProductType.allCases {
                let transition = Lifecycle.transition(from: state, on: event, type: type)
                #expect((transition.reason != nil) == (transition.outcome == .refused), "\(event) from \(state) for a \(type): \(transition)")
            }
        }
    }

    @Test func theReasonNamesWhatStandsInTheWay() {
        #expect(Lifecycle.transition(from: .refundDue, on: .grant, type: .consumable).reason == .refundDue)
        #expect(Lifecycle.transition(from: .revoked, on: .grant, type: .consumable).reason == .revoked)
        #expect(Lifecycle.transition(from: .rejected, on: .grant, type: .consumable).reason == .rejected)
        #expect(Lifecycle.transition(from: .revokedUnseen, on: .verified, type: .consumable).reason == .revoked)
        #expect(Lifecycle.transition(from: .rejected, on: .finish, type: .consumable).reason == .notGranted)
        #expect(Lifecycle.transition(from: .granted, on: .restoreByAnotherUser(.keep), type: .nonConsumable).reason == .ownedByAnotherUser)
        #expect(Lifecycle.transition(from: .granted, on: .restoreByAnotherUser(.transfer), type: .nonConsumable).reason == nil)
        #expect(Lifecycle.transition(from: .granted, on: .restoreByAnotherUser(.transfer), type: .consumable).reason == .transactionOfAnotherUser)
        #expect(Lifecycle.transition(from: .revoked, on: .restoreByAnotherUser(.transfer), type: .autoRenewable).reason == .transactionOfAnotherUser)
    }
}

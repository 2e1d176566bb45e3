import Foundation
import PurchaseDomain
import Testing

/// The finish policy against the rules it stands for: never finish what was not granted (rule 1), a consumable when it
/// is consumed and an entitlement at its grant (rule 4), and the App Store's own Finish Transaction call never replaced
/// by the app's report.
@Suite struct FinishPolicyTests {
    private func record(_ state: PurchaseState, _ type: ProductType, storeConsumed: Bool = false) -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: TransactionID("t-1")), userId: UserID("u-1"),
                       productId: ProductID("p"), productType: type, quantity: 1, purchaseTime: Date(timeIntervalSince1970: 0),
                       state: state, storeConsumed: storeConsumed)
    }

    /// Whatever the store or product, a purchase the lifecycle would not finish is never finished at its grant.
    @Test(arguments: PurchaseState.allCases) func aPurchaseTheLifecycleWillNotFinishIsLeftAlone(_ state: PurchaseState) {
        for type in ProductType.allCases {
            let finish = Lifecycle.transition(from: state, on: .finish, type: type).outcome
            for api in [nil, FinishMethod.appStoreServerAPI, .googlePlayAPI] {
                for reinstated in [false, true] {
                    let step = FinishPolicy.onGrant(record(state, type), finishesThroughStoreAPI: api, reinstated: reinstated)
                    if finish != .applied && finish != .repeated {
                        #expect(step == .nothing, "\(type) in \(state) got \(step)")
                    } else {
                        #expect(step != .nothing && step != .refuse, "\(type) in \(state) is left unfinished")
                    }
                }
            }
        }
    }

    @Test func withoutTheStoresAPIAnEntitlementFinishesAtItsGrantAndAConsumableWhenConsumed() {
        #expect(FinishPolicy.onGrant(record(.granted, .nonConsumable), finishesThroughStoreAPI: nil, reinstated: false) == .finish(.entitlementGranted))
        #expect(FinishPolicy.onGrant(record(.granted, .autoRenewable), finishesThroughStoreAPI: nil, reinstated: false) == .finish(.entitlementGranted))
        #expect(FinishPolicy.onGrant(record(.granted, .consumable), finishesThroughStoreAPI: nil, reinstated: false) == .finishIfConsumptionReported)
        #expect(FinishPolicy.onGrant(record(.granted, .consumable, storeConsumed: true), finishesThroughStoreAPI: nil, reinstated: false)
            == .finish(.storeReportedConsumed))
    }

    /// With the App Store's API every type is finished by its call, once: a purchase finished already is answered again
    /// without a call, unless a reversed refund re-granted it (then the store is told again).
    @Test(arguments: ProductType.allCases) func theStoresAPIFinishesEveryTypeOnce(_ type: ProductType) {
        for method in [FinishMethod.appStoreServerAPI, .googlePlayAPI] {
            #expect(FinishPolicy.onGrant(record(.granted, type), finishesThroughStoreAPI: method, reinstated: false) == .callStoreAPI)
            #expect(FinishPolicy.onGrant(record(.finished, type), finishesThroughStoreAPI: method, reinstated: false) == .finish(method))
            #expect(FinishPolicy.onGrant(record(.finished, type), finishesThroughStoreAPI: method, reinstated: true) == .callStoreAPI)
        }
    }

    @Test(arguments: PurchaseState.allCases) func aStoreAPICallIsNeededOnlyForWhatAwaitsItsFinish(_ state: PurchaseState) {
        let awaiting = Lifecycle.awaitingFinishStates.contains(state)
        #expect(FinishPolicy.needsStoreAPICall(state, reinstated: false) == awaiting)
        #expect(FinishPolicy.needsStoreAPICall(state, reinstated: true) == (awaiting || state == .finished))
        #expect(!FinishPolicy.needsStoreAPICall(nil, reinstated: true))
    }

    /// Without the API the app's report finishes; with it, the report finishes only what the call finished already and
    /// never a purchase whose state refuses a finish.
    @Test(arguments: PurchaseState.allCases) func theAppsReportNeverStandsInForTheStoresCall(_ state: PurchaseState) {
        #expect(FinishPolicy.onConsumptionReport(state, finishesThroughStoreAPI: false) == .finish(.consumedByApp))
        let step = FinishPolicy.onConsumptionReport(state, finishesThroughStoreAPI: true)
        switch Lifecycle.transition(from: state, on: .finish, type: .consumable).outcome {
        case .repeated: #expect(step == .finish(.consumedByApp))
        case .applied, .waiting: #expect(step == .nothing, "\(state)")
        case .refused, .ignored: #expect(step == .refuse, "\(state)")
        }
        #expect(FinishPolicy.onConsumptionReport(nil, finishesThroughStoreAPI: true) == .refuse)
    }

    /// A report of consumption is kept for the grant exactly where the grant is still to come (now, or once a submission
    /// claims the charge).
    @Test(arguments: PurchaseState.allCases) func aReportWaitsOnlyForAGrantStillToCome(_ state: PurchaseState) {
        let grantToCome = state.isRecorded && [.applied, .waiting].contains(Lifecycle.transition(from: state, on: .grant, type: .consumable).outcome)
        #expect(FinishPolicy.awaitsGrant(state) == grantToCome)
    }

    /// The finish rule does not depend on what was bought: the policy asks it with `unknown` where it knows no type.
    @Test(arguments: PurchaseState.allCases) func theFinishTransitionIsTheSameForEveryType(_ state: PurchaseState) {
        let unknown = Lifecycle.transition(from: state, on: .finish, type: .unknown)
        for type in ProductType.allCases {
            #expect(Lifecycle.transition(from: state, on: .finish, type: type) == unknown, "\(type) in \(state)")
        }
    }
}

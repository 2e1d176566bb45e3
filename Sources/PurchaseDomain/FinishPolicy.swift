/// How a purchase was completed with its store (`transaction.finished`'s `method`).
public enum FinishMethod: String, Codable, Sendable, Hashable, CaseIterable {
    /// The store's API finished it (App Store Finish Transaction).
    case appStoreServerAPI
    /// The Android Publisher API consumed it (a consumable) or acknowledged it (an entitlement) at its grant.
    case googlePlayAPI
    /// The app reported the consumable consumed.
    case consumedByApp
    /// The store reported it consumed when it was verified (AppCoins `consumptionState`).
    case storeReportedConsumed
    /// An entitlement: complete at its grant.
    case entitlementGranted
}

/// When and how a granted purchase is completed with its store: never before its grant (rule 1); a consumable when it
/// is consumed, an entitlement at its grant (rule 4); with the store's API (the App Store's Finish Transaction, Google
/// Play's consume or acknowledge), by its call at the grant, which the app's consumption report never replaces. The finisher carries out the step; the store's `finish`
/// decides again (`LifecycleEvent.finish`), so a state changed since is judged right.
public enum FinishPolicy {
    /// What to do for a purchase now.
    public enum Step: Hashable, Sendable {
        /// Call the store's API to finish it, then record it finished (`appStoreServerAPI`, `googlePlayAPI`).
        case callStoreAPI
        /// Record it finished now (or answer again that it is), completed by `method`.
        case finish(FinishMethod)
        /// A consumable: finished when the app reports it consumed. That report may have come first: if so, finish it now
        /// (`consumedByApp`); else its report finishes it when it comes.
        case finishIfConsumptionReported
        /// Nothing to complete now: not granted yet (its grant does it), or revoked or due since.
        case nothing
        /// Never finished: its state refuses the finish (the answer is a dead letter, `notGranted`).
        case refuse
    }

    /// The step for `record` when its `item.granted` arrives.
    /// - Parameter finishesThroughStoreAPI: how its store completes purchases through an API the finisher can call (the
    ///   App Store's Finish Transaction, Google Play's consume or acknowledge, with API credentials); nil when it has none.
    /// - Parameter reinstated: the grant gave back what a reversed refund took: a purchase refunded before it was finished
    ///   with the store is finished with it now, and one finished before is finished again (the store answers as before).
    public static func onGrant(_ record: PurchaseRecord, finishesThroughStoreAPI: FinishMethod?, reinstated: Bool) -> Step {
        let finish = Lifecycle.transition(from: record.state, on: .finish, type: record.productType).outcome
        guard finish == .applied || finish == .repeated else { return .nothing }
        if let method = finishesThroughStoreAPI {
            return needsStoreAPICall(record.state, reinstated: reinstated) ? .callStoreAPI : .finish(method)
        }
        if record.productType.isEntitlement { return .finish(.entitlementGranted) }
        if record.storeConsumed { return .finish(.storeReportedConsumed) }
        return .finishIfConsumptionReported
    }

    /// Whether a purchase in `state` is finished through the store's API now: it awaits its finish, or a re-grant
    /// (`reinstated`) made it finished without a call.
    public static func needsStoreAPICall(_ state: PurchaseState?, reinstated: Bool) -> Bool {
        guard let state else { return false }
        return switch Lifecycle.transition(from: state, on: .finish, type: .unknown).outcome {
        case .applied: true
        case .repeated: reinstated
        case .waiting, .refused, .ignored: false
        }
    }

    /// Whether a recorded purchase in `state` is not finished yet only because its grant has not come: a report that it
    /// was consumed is kept for the grant to finish it, not refused.
    public static func awaitsGrant(_ state: PurchaseState) -> Bool {
        state.isRecorded && Lifecycle.transition(from: state, on: .finish, type: .unknown).outcome == .waiting
    }

    /// The step for the app's report that a purchase in `state` (recorded with the report) was consumed.
    public static func onConsumptionReport(_ state: PurchaseState?, finishesThroughStoreAPI: Bool) -> Step {
        guard finishesThroughStoreAPI else { return .finish(.consumedByApp) }
        // The grant's Finish Transaction call (retried until the store answers) finishes it, never this report: finished
        // here, it would never be finished with the store. Only a purchase finished already is answered again.
        guard let state else { return .refuse }
        return switch Lifecycle.transition(from: state, on: .finish, type: .unknown).outcome {
        case .repeated: .finish(.consumedByApp)
        case .applied, .waiting: .nothing
        case .refused, .ignored: .refuse
        }
    }
}

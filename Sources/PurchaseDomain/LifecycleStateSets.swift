/// The sets of states and product types the store selects purchases by, read off `Lifecycle.transition`: a query asks
/// for "what the lifecycle would grant, finish or flag", never for states it names itself, so a new state or rule
/// changes the queries with it.
extension Lifecycle {
    /// States in which a purchase is still owed something: its grant or its finish applies (the store's `is_open`).
    public static let openStates: [PurchaseState] = PurchaseState.recorded.filter { state in
        ProductType.allCases.contains { type in
            [LifecycleEvent.grant, .finish].contains { transition(from: state, on: $0, type: type).outcome == .applied }
        }
    }

    /// Product types a purchase of which is flagged at its deadline when not consumed.
    public static let typesFlaggedAtDeadline: [ProductType] = ProductType.allCases.filter { type in
        PurchaseState.recorded.contains { flagsAtDeadline($0, type) }
    }

    /// States in which the deadline flags a purchase of a type in `typesFlaggedAtDeadline`.
    public static let dueStates: [PurchaseState] = PurchaseState.recorded.filter { state in
        typesFlaggedAtDeadline.contains { flagsAtDeadline(state, $0) }
    }

    /// The state the deadline leaves a flagged purchase in: its refund is due, and its notice is sent from there.
    public static let flaggedState: PurchaseState = {
        guard let state = dueStates.first, let type = typesFlaggedAtDeadline.first else { preconditionFailure("the lifecycle flags nothing") }
        return transition(from: state, on: .deadlinePassed, type: type).to
    }()

    /// Due states in which a report of the consumption finishes the purchase rather than waits for its grant: a purchase
    /// in one of them is worth asking the store about again before it is flagged.
    public static let recheckableStates: [PurchaseState] = dueStates.filter { state in
        typesFlaggedAtDeadline.contains { transition(from: state, on: .finish, type: $0).outcome == .applied }
    }

    /// States in which a purchase is granted and waits for its finish (a user's pending purchases).
    public static let awaitingFinishStates: [PurchaseState] = PurchaseState.recorded.filter { state in
        ProductType.allCases.contains { transition(from: state, on: .finish, type: $0).outcome == .applied }
    }

    /// States a proven payment can be in: those the store's proof (`verified`) leads to, and every state reached from
    /// them. A purchase in one of them has an owner (a refused verification has none).
    public static let provenStates: [PurchaseState] = {
        var reached: [PurchaseState] = []
        var next = PurchaseState.allCases.filter { !$0.isRecorded }.map { transition(from: $0, on: .verified, type: .unknown).to }
        while let state = next.popLast() {
            guard !reached.contains(state) else { continue }
            reached.append(state)
            // A proven payment has an owner: its refund's reversal never leaves it unclaimed.
            for event in LifecycleEvent.allCases where event != .verificationRefused && event != .refundReversed(.unclaimed) {
                for type in ProductType.allCases {
                    let to = transition(from: state, on: event, type: type).to
                    if to.isRecorded, !reached.contains(to) { next.append(to) }
                }
            }
        }
        return PurchaseState.recorded.filter(reached.contains)
    }()

    private static func flagsAtDeadline(_ state: PurchaseState, _ type: ProductType) -> Bool {
        transition(from: state, on: .deadlinePassed, type: type).effects.contains(.flagRefundDue)
    }
}

import Foundation

/// Where purchases are kept: what the stages ask of the store. Each decision (`recordVerified`, `grant`, `finish`, …)
/// takes the purchase's state through `Lifecycle.transition` and applies its effects in one transaction, so that a
/// decision and its effects happen together or not at all; what the transition refuses is answered, never thrown.
///
/// The purchase store (`SQLPurchaseStore`, on PostgreSQL or SQLite) is the implementation the workers run on; tests of
/// the stages run on an in-memory one. Both answer the repository contract tests.
public protocol PurchaseRepository: Sendable {
    // MARK: Transactions

    /// Runs `body` in one transaction: the calls it makes join it; committed when it returns, rolled back when it throws.
    /// Within a batch, `body` simply runs in it.
    func batch<T: Sendable>(_ body: () async throws -> T) async throws -> T

    /// In a batch: the purchases of `keys` (and with `ownersBalances`, their owners' balances) are read at once, rather
    /// than one by one as each decision needs them. A hint: answers are the same without it.
    func readAhead(_ keys: [PurchaseKey], ownersBalances: Bool) async throws

    /// Whether `error`, thrown by one of this repository's calls, may pass when the call is tried again (a lost
    /// connection, a serialization failure, a lock timeout), rather than be the same on every try.
    func isTransient(_ error: any Error) -> Bool

    // MARK: Reads

    /// The purchase's record, if it has one.
    func purchase(_ key: PurchaseKey) async throws -> PurchaseRecord?

    /// The recorded state of each of `keys` that has a record.
    func states(of keys: [PurchaseKey]) async throws -> [PurchaseKey: PurchaseState]

    /// The records of those of `keys` that are recorded, read at once (outside a batch: for what is decided before one).
    func purchases(_ keys: [PurchaseKey]) async throws -> [PurchaseKey: PurchaseRecord]

    /// `states(of:)` with the environment each was verified in (`Sandbox`, `Production`, …; nil when the store named none).
    func statesAndEnvironments(of keys: [PurchaseKey]) async throws -> [PurchaseKey: (state: PurchaseState, environment: String?, app: AppID?)]

    /// The user of the subscription (or purchase) whose original transaction id is `originalTransactionId`: the owner a
    /// renewal from a notification is granted to.
    func owner(store: Store, originalTransactionId: TransactionID) async throws -> UserID?

    /// The original transaction id of the purchases recorded with `purchaseToken` (Google Play, AppCoins): the
    /// subscription a Google Play purchase naming it as its `linkedPurchaseToken` continues. Nil when none is recorded.
    func originalTransactionId(store: Store, purchaseToken: PurchaseToken) async throws -> TransactionID?

    /// The purchases recorded with `purchaseToken`, oldest first: the line items of the Stripe payment intent (or invoice)
    /// a refund or a dispute names. Empty when none is recorded.
    func purchases(store: Store, purchaseToken: PurchaseToken) async throws -> [PurchaseKey]

    /// The purchases under `originalTransactionId` (the original, its renewals and restores) that `userId` holds, oldest
    /// first: what moves when another user restores it under the `transfer` policy.
    func purchases(store: Store, originalTransactionId: TransactionID, ownedBy userId: UserID) async throws -> [PurchaseKey]

    /// When the app reported `key` consumed (`recordConsumed`): nil when it did not, or the purchase is not recorded.
    func appReportedConsumption(_ key: PurchaseKey) async throws -> Date?

    // MARK: Decisions

    /// Records a verified purchase (`LifecycleEvent.verified`); one recorded already is left as it is.
    func recordVerified(_ purchase: PurchaseRecord, at now: Date) async throws -> RecordOutcome
    /// Records a charge the store announced that no user is known for (`LifecycleEvent.chargeAnnounced`), owned by
    /// `UserID.nobody`: kept `unclaimed` until a submission of it claims it (`recordVerified`).
    func recordUnclaimed(_ purchase: PurchaseRecord, at now: Date) async throws -> RecordOutcome
    /// The user `token` was registered for (`registerAccountToken`), else the user of the latest proven purchase bound to it
    /// (compared as `AccountToken.isSameAccount`) that is still its first owner's (not restored by another user under
    /// `transfer`), if any.
    func owner(ofAccountToken token: AccountToken) async throws -> UserID?

    /// Registers `token` as `userId`'s (`user.token`, the app's backend made it for them): the first registration of a
    /// token stands, and a token a purchase of another user is bound to is that user's. Answers whose the token is now:
    /// `userId`, or the other user it is refused for.
    func registerAccountToken(_ token: AccountToken, for userId: UserID, at now: Date) async throws -> UserID

    /// Gives `items` for a verified purchase (`LifecycleEvent.grant`); one granted before answers with its original items.
    /// Throws `BalanceOutOfRange`, having written nothing, when a currency's balance would pass `CurrencyAmounts.balanceLimit`.
    func grant(_ key: PurchaseKey, items: [GrantItem], at now: Date) async throws -> GrantOutcome

    /// Marks a granted purchase finished (`LifecycleEvent.finish`); never one that was not granted.
    func finish(_ key: PurchaseKey, at now: Date) async throws -> FinishOutcome

    /// The store refunded or revoked the purchase (`LifecycleEvent.revoke`), or with `onlyIfDue`, a due refund is clawed
    /// back (`LifecycleEvent.clawBack`). `decidedAt`: when the store decided it, to order it against its reversal. `share`:
    /// a partial refund's (prorated, or of some units of a multi-quantity purchase), which takes back that part of each
    /// currency (`RefundShare`); nil: all of it.
    func revoke(_ key: PurchaseKey, reason: String, decidedAt: Date?, onlyIfDue: Bool, share: RefundShare.Part?, at now: Date) async throws -> RevokeOutcome

    /// The store reversed its refund (`LifecycleEvent.refundReversed`): `items` (what the purchase grants) are given back.
    /// Throws `BalanceOutOfRange`, having written nothing, when a currency's balance would pass `CurrencyAmounts.balanceLimit`.
    func reinstate(_ key: PurchaseKey, items: [GrantItem], decidedAt: Date?, at now: Date) async throws -> ReinstateOutcome

    /// A restore by `newUser` of a purchase another user owns (`LifecycleEvent.restoreByAnotherUser`).
    func transfer(_ key: PurchaseKey, to newUser: UserID, policy: RestorePolicy, at now: Date) async throws -> TransferOutcome

    /// The subscription period `key` paid for ended (`LifecycleEvent.expire`).
    func expireSubscription(_ key: PurchaseKey, at now: Date) async throws -> ExpireOutcome

    /// The store moved the period's renewal date to `expiresDate` (`LifecycleEvent.renewalExtended`).
    func extendSubscription(_ key: PurchaseKey, to expiresDate: Date, at now: Date) async throws -> ExtendOutcome

    /// The app reported the purchase consumed at `at`: kept with its record, or until it is recorded.
    func recordConsumed(_ key: PurchaseKey, at: Date) async throws -> ConsumptionReport
    /// Records that the store's notification `id` was verified and handled (with what it led to, in the same batch), so
    /// that a reconciliation pass tells the ones that never arrived from those that did.
    func recordNotificationSeen(_ id: NotificationID, type: String, at now: Date) async throws
    /// Keeps `rejections` for their users' histories, apart from the purchases (no purchase's lifecycle changes); one kept
    /// already under the same user and cause is left as it is. In a batch, written with the batch's other writes.
    func recordRejections(_ rejections: [RejectionRecord]) async throws
}

extension PurchaseRepository {
    public func readAhead(_ keys: [PurchaseKey]) async throws { try await readAhead(keys, ownersBalances: false) }

    public func revoke(_ key: PurchaseKey, reason: String = "REFUND", decidedAt: Date? = nil, onlyIfDue: Bool = false, share: RefundShare.Part? = nil,
                       at now: Date) async throws -> RevokeOutcome {
        try await revoke(key, reason: reason, decidedAt: decidedAt, onlyIfDue: onlyIfDue, share: share, at: now)
    }

    public func reinstate(_ key: PurchaseKey, items: [GrantItem], at now: Date) async throws -> ReinstateOutcome {
        try await reinstate(key, items: items, decidedAt: nil, at: now)
    }
}

/// What the sweeper asks of the store: purchases past their deadline, and the refund notices still to send.
public protocol SweepRepository: PurchaseRepository {
    /// Flags up to `limit` purchases of `store` unconsumed `deadline` after their purchase (`LifecycleEvent.deadlinePassed`)
    /// and answers them. `leavingRecheckable`: those whose consumption the store's API can still report are left to
    /// `dueGrantedWithToken` and `flagDue`.
    func sweepDue(store: Store, deadline: TimeInterval, now: Date, limit: Int, leavingRecheckable: Bool) async throws -> [DuePurchase]

    /// Purchases flagged whose `refund.due` was not sent yet (the outbox).
    func unsentRefundNotices(store: Store, deadline: TimeInterval, limit: Int) async throws -> [DuePurchase]

    /// Their `refund.due` was sent.
    func markRefundNoticesSent(_ keys: [PurchaseKey], at now: Date) async throws

    /// Granted consumables of `store` past `now - deadline`, not known consumed, that carry a token to ask the store about
    /// again, by purchase time (then transaction id): the page of `limit` after `last`, the last purchase of the page before.
    func dueGrantedWithToken(store: Store, deadline: TimeInterval, now: Date, after last: PurchaseRecord?, limit: Int) async throws -> [PurchaseRecord]

    /// Every purchase of `store` the deadline flags (open ones and charges nobody claimed), not flagged, by purchase time
    /// (then transaction id): the page of `limit` after `last`. For a store asked about each before it is flagged (`flagDue`).
    func dueToAsk(store: Store, deadline: TimeInterval, now: Date, after last: PurchaseRecord?, limit: Int) async throws -> [PurchaseRecord]

    /// Flags those of `keys` that are still due as `sweepDue` would (exactly once, however many sweepers run): for
    /// purchases the store was asked about again and answered not consumed. Returns those this call flagged.
    func flagDue(_ keys: [PurchaseKey], deadline: TimeInterval, now: Date) async throws -> [DuePurchase]

    /// How many purchases of `store` bought before `boughtBefore` are still open (verified or granted, not finished), by the
    /// app they were bought in (nil: the primary app, as recorded): near a deadline, they are what the store refunds
    /// (Google Play, after three days) or the sweeper flags.
    func openPurchases(store: Store, boughtBefore: Date) async throws -> [AppID?: Int]

    /// Forgets the kept consumption reports (`recordConsumed`) whose purchase is recorded: its record took the report.
    /// Returns how many.
    @discardableResult
    func pruneTakenConsumptionReports() async throws -> Int

    /// Forgets up to `limit` of the kept rejections (`recordRejections`) made before `before`, the oldest first. Returns how
    /// many: fewer than `limit` once none is left.
    func pruneRejections(before: Date, limit: Int) async throws -> Int
}

extension SweepRepository {
    public func sweepDue(store: Store, deadline: TimeInterval, now: Date, limit: Int = 500) async throws -> [DuePurchase] {
        try await sweepDue(store: store, deadline: deadline, now: now, limit: limit, leavingRecheckable: false)
    }

    public func unsentRefundNotices(store: Store, deadline: TimeInterval) async throws -> [DuePurchase] {
        try await unsentRefundNotices(store: store, deadline: deadline, limit: 500)
    }
}

/// What answering the App Store's consumption requests asks of the store.
public protocol ConsumptionRequestRepository: PurchaseRepository {
    /// Records `userId`'s answer decided at `decidedAt` (a time ahead of `now` counts as `now`), unless a later decision
    /// is recorded already (events may arrive out of order); of two decisions at the same time the refusal stands.
    /// Returns whether this one now stands.
    @discardableResult
    func recordConsent(userId: UserID, consumptionData: Bool, decidedAt: Date, now: Date) async throws -> Bool

    /// `userId`'s standing answer: nil when never asked.
    func consumptionDataConsent(of userId: UserID) async throws -> Bool?

    /// What a consumption answer may say of the purchase; nil when it is not recorded.
    func consumptionFacts(_ key: PurchaseKey) async throws -> ConsumptionFacts?

    /// Claims the consumption request `notificationUUID` about `key` for answering: `claimed` when it is this caller's to
    /// answer (new, or a claim older than `staleAfter` whose answer may not have gone out), `answered` when it was,
    /// `inProgress` while another's claim is fresh.
    func claimConsumptionRequest(_ key: PurchaseKey, notificationUUID: String, at now: Date, staleAfter: TimeInterval) async throws -> ConsumptionClaim

    /// Gives up a claim (the answer could not be sent: another try may).
    func releaseConsumptionClaim(notificationUUID: String) async throws

    /// Records what became of the request.
    func recordConsumptionAnswer(notificationUUID: String, outcome: String, detail: String?, at now: Date) async throws
}

/// What keeping the store's subscription statuses asks of the store (`SubscriptionStatus`).
public protocol SubscriptionStatusRepository: PurchaseRepository {
    /// Records `status` as `SubscriptionStatus.update` decides against the one stored for its subscription, in one
    /// transaction (or the batch's): a change or a newer `asOf` is kept, stale information changes nothing. Answers
    /// what it decided. A status may be recorded before any purchase of its subscription is.
    func recordSubscriptionStatus(_ status: SubscriptionStatus) async throws -> SubscriptionStatusUpdate

    /// The status recorded for the subscription whose original transaction is `originalTransactionId`, if any.
    func subscriptionStatus(store: Store, originalTransactionId: TransactionID) async throws -> SubscriptionStatus?

    /// The statuses of the subscriptions `userId` owns (see `owner(store:originalTransactionId:)`), by store and
    /// original transaction id.
    func subscriptionStatuses(of userId: UserID) async throws -> [SubscriptionStatus]

    /// Subscriptions of `store` whose latest period in force (granted or finished, owned by a user) expired within
    /// `expiredWithin`, with no later period recorded and no status signed after that expiry: neither a renewal nor the
    /// store's word on why not reached the pipeline. At most `limit`, the earliest expiry first.
    func lapsedSubscriptions(store: Store, expiredWithin: ClosedRange<Date>, limit: Int) async throws -> [LapsedSubscription]
}

/// A subscription whose latest period expired with nothing heard of it since (`lapsedSubscriptions`).
public struct LapsedSubscription: Sendable, Hashable {
    /// Its latest period.
    public var key: PurchaseKey
    public var originalTransactionId: TransactionID
    public var userId: UserID
    public var environment: String?
    public var expiresDate: Date
    /// The app it was bought in (nil: the primary app).
    public var app: AppID?
    public var productId: ProductID?
    /// The Android app and purchase token of a Google Play period (its token is the one to ask about: an upgrade's own,
    /// not the first of the subscription it continues).
    public var packageName: PackageName?
    public var purchaseToken: PurchaseToken?

    public init(key: PurchaseKey, originalTransactionId: TransactionID, userId: UserID, environment: String?, expiresDate: Date, app: AppID? = nil,
                productId: ProductID? = nil, packageName: PackageName? = nil, purchaseToken: PurchaseToken? = nil) {
        self.app = app
        self.productId = productId
        self.packageName = packageName
        self.purchaseToken = purchaseToken
        self.key = key
        self.originalTransactionId = originalTransactionId
        self.userId = userId
        self.environment = environment
        self.expiresDate = expiresDate
    }
}

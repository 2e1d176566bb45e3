import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import Synchronization
import WorkerRuntime

/// `iap-sweeper`: finds consumables paid but neither finished nor known consumed whose purchase time is older than
/// the consume deadline, marks them `refund_due` — exactly once, however many sweepers run — and emits `refund.due`.
/// Non-consumables and subscriptions are never flagged (the lifecycle decides). Where the store can be asked, it is
/// asked first (AppCoins: consumed since?; the App Store: refunded already?).
/// The event goes through an outbox: sent after the flag, re-sent (same `ce_id`) until recorded as sent,
/// so a crash between the two loses nothing. Runs on a schedule, or once (a Kubernetes CronJob).
/// Generic over `Clock` so that tests drive time.
public final class SweeperService<C: Clock>: Service where C.Duration == Duration {
    public struct Configuration: Sendable {
        /// Consume deadline per store (AppCoins refunds unconsumed purchases after 24 hours).
        public var deadlines: [Store: TimeInterval]
        public var interval: Duration
        public var batchSize: Int
        /// A subscription whose latest period expired more than `lapseMargin` and less than `lapseLookback` ago with
        /// nothing heard since is asked about (with the App Store's API).
        public var lapseMargin: TimeInterval
        public var lapseLookback: TimeInterval
        /// Refund each Google Play purchase flagged due through `orders.refund` before its `refund.due` goes out (with
        /// claw-back on: the granter then takes the items back).
        public var refundsGooglePlay: Bool
        /// How long the rejections kept for the users' histories are kept (`pruneRejections`, `batchSize` at a time).
        public var rejectionRetention: TimeInterval

        public init(deadlines: [Store: TimeInterval] = [.appstore: 86_400, .appcoins: 86_400, .googleplay: 259_200], interval: Duration = .seconds(300), batchSize: Int = 500,
                    lapseMargin: TimeInterval = 3_600, lapseLookback: TimeInterval = 3 * 86_400, refundsGooglePlay: Bool = false,
                    rejectionRetention: TimeInterval = 90 * 86_400) {
            self.refundsGooglePlay = refundsGooglePlay
            self.rejectionRetention = rejectionRetention
            self.deadlines = deadlines
            self.interval = interval
            self.batchSize = batchSize
            self.lapseMargin = lapseMargin
            self.lapseLookback = lapseLookback
        }
    }

    let configuration: Configuration
    let store: any SweepRepository & SubscriptionStatusRepository
    let producer: KafkaProducer
    let context: StageContext
    private let clock: C
    private let appCoins: AppCoinsVerifier?
    private let appStore: PerApp<[AppStoreEnvironment: AppStoreLookup]>
    private let googlePlay: GooglePlayVerifier?
    private let state = Mutex<(stopped: Bool, sleeper: Task<Void, Never>?)>((false, nil))
    /// What asking the stores decided, since the service started (`storeChecks`).
    let checks = Mutex<[String: Int]>([:])

    /// How many times the App Store was asked about a due purchase or a lapsed subscription, by what came of it:
    /// `refunded`, `notRefunded`, `unknownToTheStore`, `unavailable` (not asked: the API down, rate-limited or its key
    /// refused), `untrusted` (an answer that did not verify), `subscriptionSettled`; and Google Play about a lapsed
    /// subscription or a due refund: `googlePlaySubscriptionSettled`, `googlePlayRefund.refunded`, `…alreadyRefunded`,
    /// `…refused` (refund those by hand), `googlePlayUnavailable`. Due purchases wait unflagged while
    /// `unavailable` or `untrusted` grow, lapsed subscriptions while either `…Unavailable` does: alert on them.
    public var storeChecks: [String: Int] { checks.withLock { $0 } }

    /// Purchases flagged refund-due since the service started, by store (`iap_refunds_flagged_total`).
    public var flaggedDue: [Store: Int] { flaggedByStore.withLock { $0 } }
    let flaggedByStore = Mutex<[Store: Int]>([:])

    /// - Parameter appCoins: asked again, before flagging, about AppCoins purchases that are due: one the
    ///   store reports consumed is finished instead.
    /// - Parameter appStore: the App Store of each environment, asked before flagging about App Store purchases that are
    ///   due: one it reports refunded is revoked instead (`recheckAppStore`).
    public convenience init(configuration: Configuration, store: any SweepRepository & SubscriptionStatusRepository, producer: KafkaProducer,
                            context: StageContext, clock: C, appCoins: AppCoinsVerifier? = nil, appStore: [AppStoreEnvironment: AppStoreLookup] = [:]) {
        self.init(configuration: configuration, store: store, producer: producer, context: context, clock: clock, appCoins: appCoins,
                  appStores: PerApp(single: appStore))
    }

    /// - Parameter appStores: each App Store app's App Store of each environment (the API's tokens name one app).
    /// - Parameter googlePlay: asked about Google Play subscriptions that lapsed with nothing heard since.
    public init(configuration: Configuration, store: any SweepRepository & SubscriptionStatusRepository, producer: KafkaProducer, context: StageContext, clock: C,
                appCoins: AppCoinsVerifier? = nil, appStores: PerApp<[AppStoreEnvironment: AppStoreLookup]>, googlePlay: GooglePlayVerifier? = nil) {
        self.appCoins = appCoins
        self.googlePlay = googlePlay
        self.appStore = appStores
        self.configuration = configuration
        self.store = store
        self.producer = producer
        self.context = context
        self.clock = clock
    }

    /// One sweep over every store: flags what is due, then sends the outbox, then prunes the rejections past their
    /// retention; returns how many this call flagged.
    @discardableResult
    public func sweepOnce() async throws -> Int {
        var flagged = 0
        try await store.pruneTakenConsumptionReports()
        for (storeName, deadline) in configuration.deadlines.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            let now = context.now()
            let storeFlagged: Int
            switch storeName {
            case .appstore where asksTheAppStore:
                // Every due purchase is asked about, and flagged (or revoked) by that alone.
                storeFlagged = try await recheckAppStore(deadline: deadline, now: now, lookups: appStore)
            case .appcoins:
                // What the re-check asks about is flagged by it alone, once the store answered: never by `flagDue`, unasked
                // (one it could not ask, or granted since it asked, waits for the next sweep).
                let rechecked = if let appCoins { try await recheckAppCoins(deadline: deadline, now: now, with: appCoins) } else { 0 }
                storeFlagged = try await rechecked + flagDue(storeName, deadline: deadline, now: now, leavingRecheckable: appCoins != nil)
            case .appstore, .googleplay, .stripe:
                storeFlagged = try await flagDue(storeName, deadline: deadline, now: now, leavingRecheckable: false)
            }
            flaggedByStore.withLock { $0[storeName, default: 0] += storeFlagged }
            flagged += storeFlagged
            try await sendRefundNotices(store: storeName, deadline: deadline)
            // Subscriptions that lapsed with nothing heard since, asked of their store where it can be.
            let settled: Int
            switch storeName {
            case .appstore: settled = asksTheAppStore ? try await settleLapsedSubscriptions(now: now, lookups: appStore) : 0
            case .googleplay: settled = if let googlePlay { try await settleLapsedGooglePlaySubscriptions(now: now, with: googlePlay) } else { 0 }
            case .appcoins: settled = 0 // sells no subscriptions
            case .stripe: settled = 0 // a subscription's end comes by its webhook, or by reconciliation of Stripe's events
            }
            if settled > 0 { context.logger.info("lapsed subscriptions settled", ["store": storeName.rawValue, "count": settled]) }
        }
        try await pruneRejections()
        return flagged
    }

    /// Flags what of `storeName` is due, a batch at a time, without asking the store; returns how many.
    private func flagDue(_ storeName: Store, deadline: TimeInterval, now: Date, leavingRecheckable: Bool) async throws -> Int {
        var count = 0
        while case let due = try await store.sweepDue(store: storeName, deadline: deadline, now: now, limit: configuration.batchSize,
                                                    leavingRecheckable: leavingRecheckable), !due.isEmpty {
            count += due.count
            context.logger.info("flagged refund due", ["store": storeName.rawValue, "count": due.count])
        }
        return count
    }

    /// Whether some App Store app's store can be asked (the API configured for it): then the App Store is asked before a
    /// flag, and about lapsed subscriptions.
    private var asksTheAppStore: Bool { appStore.byApp.values.contains { !$0.isEmpty } }

    /// Forgets the rejections kept longer than `Configuration.rejectionRetention`, `batchSize` at a time: each delete is
    /// short, whatever the backlog (a first pass after an upgrade, or a long outage).
    private func pruneRejections() async throws {
        let before = context.now().addingTimeInterval(-configuration.rejectionRetention)
        var pruned = 0
        while case let count = try await store.pruneRejections(before: before, limit: configuration.batchSize), count > 0 {
            pruned += count
            if count < configuration.batchSize { break }
        }
        if pruned > 0 { context.logger.info("rejections past their retention pruned", ["count": pruned]) }
    }

    /// Publishes `events`, each acknowledged by the broker before this returns.
    func publish(_ events: [any PipelineEvent]) async throws {
        guard !events.isEmpty, case .publish(let messages) = try context.messages(events) else { return }
        for result in await producer.send(contentsOf: messages) { _ = try result.get() }
    }

    /// Records `status` of a subscription `owner` holds, and announces it (`subscription.status`) when it changed.
    func recordAndAnnounce(_ status: SubscriptionStatus, owner: UserID) async throws {
        guard let (standing, fields) = try await store.recordSubscriptionStatus(status).announcement else { return }
        try await publish([SubscriptionStatusChanged(standing, userId: owner, changed: fields, notificationType: nil, notificationSubtype: nil,
                                                     announcedAt: context.now())])
    }

    /// Sends the outbox of `store`'s `refund.due` events. With `Configuration.refundsGooglePlay`, a Google Play purchase's
    /// order is refunded first (`refundThroughGooglePlay`): its notice waits while Google cannot be asked.
    private func sendRefundNotices(store storeName: Store, deadline: TimeInterval) async throws {
        while case let unsent = try await store.unsentRefundNotices(store: storeName, deadline: deadline, limit: configuration.batchSize), !unsent.isEmpty {
            var (ready, refunds) = (unsent, [PurchaseKey: RefundDue.StoreRefund]())
            switch storeName {
            case .googleplay:
                if configuration.refundsGooglePlay, let googlePlay { (ready, refunds) = await refundThroughGooglePlay(unsent, with: googlePlay) }
            case .appstore, .appcoins, .stripe: break // refunded by the store's own process, not through its API
            }
            let events: [any PipelineEvent] = ready.map {
                // A charge nobody claimed has no user: the notice says so (`unclaimed`).
                RefundDue(store: storeName, transactionId: $0.record.key.transactionId, userId: $0.record.owner, productId: $0.record.productId,
                          state: nil, purchaseDate: $0.record.purchaseTime, deadline: $0.deadline, flaggedAt: context.now(),
                          storeRefund: refunds[$0.record.key])
            }
            try await publish(events)
            if !ready.isEmpty { try await store.markRefundNoticesSent(ready.map(\.record.key), at: context.now()) }
            if ready.count < unsent.count { return } // the store could not be asked: the rest next sweep
        }
    }

    /// Asks the AppCoins API about every granted purchase that is due, a page at a time: one it reports consumed is
    /// finished now, one it answers unconsumed (or no longer knows) is flagged; one it could not be asked about (the API
    /// unavailable) is neither, and is asked again next sweep. A page none of which could be asked about ends the round:
    /// the API is down, and the rest wait for the next sweep too, rather than each for its timeout. Returns how many it flagged.
    private func recheckAppCoins(deadline: TimeInterval, now: Date, with appCoins: AppCoinsVerifier) async throws -> Int {
        try await recheck(.appcoins, deadline: deadline, now: now, api: "AppCoins API", page: { last in
            try await store.dueGrantedWithToken(store: .appcoins, deadline: deadline, now: now, after: last, limit: configuration.batchSize)
        }) { page in
            var unconsumed: [PurchaseKey] = []
            var unavailable = 0
            for record in page {
                // Without its package it cannot be asked: due, as without a re-check.
                guard let package = record.packageName, let token = record.purchaseToken else {
                    unconsumed.append(record.key)
                    continue
                }
                switch await appCoins.verify(packageName: package, sku: record.productId, purchaseToken: token) {
                case .success(let purchase) where purchase.isConsumed:
                    // The event first, then the store: stopped between the two, the purchase is still granted, so the next
                    // sweep asks again and sends the same event (same ce_id) before finishing it. The other order lost the
                    // event of a purchase finished just before a crash or a broker failure: no sweep sees it again.
                    try await publish([TransactionFinished(store: .appcoins, transactionId: record.key.transactionId, userId: record.userId,
                                                           method: .storeReportedConsumed, finishedAt: context.now())])
                    if case .notGranted(let state) = try await store.finish(record.key, at: context.now()) {
                        // Refunded or revoked since it was read as granted: its own event says so.
                        context.logger.warning("consumed purchase no longer granted", ["transactionId": record.key.transactionId,
                                                                                      "state": state?.rawValue ?? "unknown"])
                    }
                case .success:
                    unconsumed.append(record.key) // Not consumed: due for refund.
                case .failure(let rejection) where rejection.isRetryable:
                    unavailable += 1
                    context.logger.warning("AppCoins re-check unavailable; not flagging this round", ["transactionId": record.key.transactionId])
                case .failure:
                    unconsumed.append(record.key) // The store no longer knows it (e.g. refunded): due.
                }
            }
            return (unconsumed, unavailable)
        }
    }

    /// A re-check's round: each page `page` lists after the last (a page at a time), `decide`d — what to flag, and how
    /// many could not be asked — and flagged. A page none of which could be asked about ends the round: the `api` is down,
    /// and the rest wait for the next sweep too, rather than each for its timeout. Returns how many it flagged.
    func recheck(_ storeName: Store, deadline: TimeInterval, now: Date, api: String, page: (PurchaseRecord?) async throws -> [PurchaseRecord],
                 decide: ([PurchaseRecord]) async throws -> (flag: [PurchaseKey], unavailable: Int)) async throws -> Int {
        var flagged = 0
        var last: PurchaseRecord?
        while true {
            let records = try await page(last)
            let (toFlag, unavailable) = try await decide(records)
            let due = try await store.flagDue(toFlag, deadline: deadline, now: now)
            if !due.isEmpty {
                flagged += due.count
                context.logger.info("flagged refund due", ["store": storeName.rawValue, "count": due.count])
            }
            if !records.isEmpty && unavailable == records.count {
                context.logger.warning("\(api) unavailable; asking about the rest next sweep", ["asked": records.count])
                return flagged
            }
            guard records.count == configuration.batchSize, let next = records.last else { return flagged }
            last = next
        }
    }

    public func run() async throws {
        while !state.withLock({ $0.stopped }) {
            do {
                try await sweepOnce()
            } catch {
                context.logger.error("sweep failed; trying again next interval", ["error": "\(error)"])
            }
            let sleeper = Task { [clock, configuration] in _ = try? await clock.sleep(for: configuration.interval) }
            let stopped = state.withLock { state -> Bool in
                if !state.stopped { state.sleeper = sleeper }
                return state.stopped
            }
            if stopped { sleeper.cancel() }
            await sleeper.value
        }
        await producer.shutdown()
    }

    public func triggerGracefulShutdown() {
        state.withLock { state in
            state.stopped = true
            state.sleeper?.cancel()
        }
    }
}

import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import Synchronization
import WorkerRuntime

/// Closes the gap the App Store's webhooks leave: a notification the ingest never received (an outage longer than
/// Apple's five retries over three days, none at all in the sandbox, a misconfigured URL) is read from *Get Notification
/// History* and published on `store.notification` as if it had just arrived, with the same event id; the verifier judges
/// it as any other. Each pass reads from a checkpoint (less an overlap, never before the history Apple keeps) to now, a
/// page at a time, and publishes only what the verifier has not handled (`recovered`), so that a second pass publishes
/// nothing. One replica at a time reads each history: its checkpoint is claimed under a lease.
///
/// Generic over `Clock` so that tests drive the schedule.
public final class AppStoreReconciler<C: Clock>: Service where C.Duration == Duration {
    public struct Configuration: Sendable {
        public var interval: Duration
        /// Read again before the checkpoint, for notifications Apple lists late.
        public var overlap: TimeInterval
        /// How far back the first pass reads (Apple stops retrying a notification about three days after it was sent).
        public var firstLookback: TimeInterval
        /// How long a replica's claim on a history lasts without being renewed (each page renews it): how long a replica
        /// that died mid-pass keeps the others from the history. A page takes well under a second.
        public var lease: TimeInterval
        /// At most this many calls a second (Apple allows 50 to Get Notification History in production, a tenth of it in
        /// the sandbox).
        public var callsPerSecond: Double

        public init(interval: Duration = .seconds(900), overlap: TimeInterval = 3600, firstLookback: TimeInterval = 7 * 86_400,
                    lease: TimeInterval = 60, callsPerSecond: Double = 4) {
            self.interval = interval
            self.overlap = overlap
            self.firstLookback = firstLookback
            self.lease = lease
            self.callsPerSecond = callsPerSecond
        }
    }

    /// One environment's history and the API that serves it.
    public struct History: Sendable {
        public var environment: AppStoreEnvironment
        public var api: AppStoreServerAPIClient

        public init(environment: AppStoreEnvironment, api: AppStoreServerAPIClient) {
            self.environment = environment
            self.api = api
        }

        var checkpoint: String { "appstore.notifications.\(environment.rawValue)" }
        var kept: TimeInterval { AppStoreServerAPIClient.notificationHistoryKept(sandbox: environment != .production) }
    }

    /// What one pass over one history did.
    public struct Pass: Sendable, Equatable {
        /// Pages read, and notifications listed on them.
        public var pages = 0
        public var listed = 0
        /// Published: never handled by the verifier.
        public var recovered = 0
        /// Read to its end, and the checkpoint moved there; false when the API stopped it (it resumes from the checkpoint).
        public var completed = false
        /// Another replica held the history.
        public var skipped = false
    }

    /// Totals since the process started, for `/metrics`.
    public struct Totals: Sendable, Equatable {
        public var recovered = 0
        public var listed = 0
        public var pages = 0
        /// API calls by outcome (`ok`, `unavailable`, `refused`).
        public var calls: [String: Int] = [:]
        /// Per environment: the checkpoint's position after the last completed pass.
        public var positions: [String: Date] = [:]
    }

    private let configuration: Configuration
    private let histories: [History]
    private let store: any ReconciliationRepository
    private let producer: KafkaProducer
    private let context: StageContext
    private let clock: C
    /// This process's name on the leases.
    private let owner = "reconciler-\(UUID().uuidString.lowercased())"
    private let state = Mutex<(stopped: Bool, totals: Totals, notBefore: [String: Date])>((false, Totals(), [:]))

    public init(configuration: Configuration, histories: [History], store: any ReconciliationRepository, producer: KafkaProducer,
                context: StageContext, clock: C) {
        self.configuration = configuration
        self.histories = histories
        self.store = store
        self.producer = producer
        self.context = context
        self.clock = clock
    }

    public var totals: Totals { state.withLock { $0.totals } }

    /// One pass over every history.
    @discardableResult
    public func reconcileOnce() async throws -> [AppStoreEnvironment: Pass] {
        var passes: [AppStoreEnvironment: Pass] = [:]
        var failure: (any Error)?
        // Each history on its own: one that fails (its store unreachable) leaves the others their pass.
        for history in histories {
            do { passes[history.environment] = try await reconcile(history) } catch { failure = failure ?? error }
        }
        if let failure { throw failure }
        // Handled notifications older than any history Apple keeps are never listed again.
        let oldest = histories.map(\.kept).max() ?? 0
        _ = try await store.pruneSeenNotifications(before: context.now().addingTimeInterval(-oldest - 86_400))
        return passes
    }

    private func reconcile(_ history: History) async throws -> Pass {
        var pass = Pass()
        let now = context.now()
        if let notBefore = state.withLock({ $0.notBefore[history.checkpoint] }), now < notBefore { return pass } // as the API asked
        let claim = try await claim(history, now: now)
        guard case .claimed(let position) = claim else {
            if case .heldByAnother(let holder, let until) = claim {
                context.logger.info("notification history read by another replica", ["environment": history.environment.rawValue, "holder": holder,
                                                                                     "until": RFC3339.format(until)])
            }
            pass.skipped = true
            return pass
        }
        do {
            pass = try await read(history, from: position, to: now)
        } catch {
            try? await store.releaseCheckpoint(history.checkpoint, owner: owner) // the error is what matters
            throw error
        }
        try await store.releaseCheckpoint(history.checkpoint, owner: owner)
        state.withLock { state in
            state.totals.pages += pass.pages
            state.totals.listed += pass.listed
            if pass.completed { state.totals.positions[history.environment.rawValue] = now }
        }
        if pass.recovered > 0 {
            context.logger.warning("notifications recovered from the App Store's history", ["environment": history.environment.rawValue,
                                                                                              "recovered": pass.recovered])
        }
        return pass
    }

    /// Reads `history` from `position` (less the overlap) to `now`, holding its lease, and moves the checkpoint to `now`
    /// once every page was read.
    private func read(_ history: History, from position: Date?, to now: Date) async throws -> Pass {
        var pass = Pass()
        let earliest = now.addingTimeInterval(-history.kept + 60) // Apple refuses a start before what it keeps
        let start = max((position ?? now.addingTimeInterval(-configuration.firstLookback)).addingTimeInterval(-configuration.overlap), earliest)
        var token: String?
        repeat {
            if pass.pages > 0 {
                try await clock.sleep(for: .milliseconds(Int64(1000 / max(configuration.callsPerSecond, 0.001))), unless: isStopped)
                // Renewed for each page; lost (the pass outlived its lease and another replica took it): that one reads on.
                guard !isStopped(), case .claimed = try await claim(history, now: context.now()) else { return pass }
            }
            let page: NotificationHistoryPage
            switch await history.api.notificationHistory(from: start, to: now, paginationToken: token) {
            case .success(let answered):
                page = answered
                count("ok")
            case .failure(.unavailable(let why, let retryAfter)):
                count("unavailable")
                if let retryAfter { state.withLock { $0.notBefore[history.checkpoint] = context.now().addingTimeInterval(Double(retryAfter.components.seconds)) } }
                context.logger.warning("notification history unavailable; the next pass resumes from the checkpoint",
                                       ["environment": history.environment.rawValue, "reason": why])
                return pass
            case .failure(.refused(let status, let detail)):
                count("refused")
                context.logger.error("notification history refused", ["environment": history.environment.rawValue, "status": status, "detail": detail])
                return pass
            }
            pass.pages += 1
            pass.listed += page.signedPayloads.count
            pass.recovered += try await publishUnseen(page.signedPayloads)
            token = page.paginationToken
        } while token != nil
        pass.completed = try await store.advanceCheckpoint(history.checkpoint, owner: owner, to: now, now: context.now())
        return pass
    }

    private func isStopped() -> Bool { state.withLock { $0.stopped } }

    private func claim(_ history: History, now: Date) async throws -> CheckpointClaim {
        try await store.claimCheckpoint(history.checkpoint, owner: owner, until: now.addingTimeInterval(configuration.lease), now: now)
    }

    private func count(_ outcome: String) { state.withLock { $0.totals.calls[outcome, default: 0] += 1 } }

    /// Publishes those of `payloads` the verifier has not handled, in their order; how many. One whose id cannot be read
    /// is published too: the verifier says what is wrong with it.
    private func publishUnseen(_ payloads: [String]) async throws -> Int {
        let receivedAt = context.now()
        let received = payloads.map { StoreNotificationReceived(signedPayload: $0, receivedAt: receivedAt) }
        let ids = received.map(\.notificationID)
        let unseen = try await store.unseenNotifications(ids.compactMap { $0 })
        var published: Set<NotificationID> = []
        var events: [any PipelineEvent] = []
        for (notification, id) in zip(received, ids) {
            if let id { guard unseen.contains(id), published.insert(id).inserted else { continue } }
            events.append(notification)
        }
        guard !events.isEmpty else { return 0 }
        if case .publish(let messages) = try context.messages(events) {
            for result in await producer.send(contentsOf: messages) { _ = try result.get() }
        }
        state.withLock { $0.totals.recovered += events.count }
        return events.count
    }

    public func run() async throws {
        while !state.withLock({ $0.stopped }) {
            do {
                try await reconcileOnce()
            } catch {
                context.logger.error("reconciliation pass failed; trying again next interval", ["error": "\(error)"])
            }
            try? await clock.sleep(for: configuration.interval, unless: isStopped)
        }
        await producer.shutdown()
    }

    public func triggerGracefulShutdown() { state.withLock { $0.stopped = true } }
}

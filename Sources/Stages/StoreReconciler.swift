import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import Synchronization
import WorkerRuntime

/// Closes the gap a store's notifications leave: what the pipeline never received (an App Store webhook lost in an outage
/// longer than Apple's retries, none at all in the sandbox, a misconfigured URL; a Google Play refund no notification told
/// of) is read from the store's own history and published as if it had just arrived. Each pass reads a history from its
/// checkpoint (less an overlap, never before what the store keeps) to now, a page at a time, and publishes only what the
/// pipeline has not handled (`recovered`), so that a second pass publishes nothing. One replica at a time reads each
/// history: its checkpoint is claimed under a lease.
///
/// Generic over `Clock` so that tests drive the schedule.
public final class StoreReconciler<C: Clock>: Service where C.Duration == Duration {
    public struct Configuration: Sendable {
        public var interval: Duration
        /// Read again before the checkpoint, for notifications Apple lists late.
        public var overlap: TimeInterval
        /// How far back the first pass reads (Apple stops retrying a notification about three days after it was sent), at
        /// most what the store keeps.
        public var firstLookback: TimeInterval
        /// How long a replica's claim on a history lasts without being renewed (each page renews it): how long a replica
        /// that died mid-pass keeps the others from the history. A page takes well under a second.
        public var lease: TimeInterval
        /// At most this many calls a second to one history (Apple allows 50 to Get Notification History in production, a
        /// tenth of it in the sandbox; Google 30 calls in 30 seconds to the voided purchases).
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
        /// Per history (its name): what was published.
        public var recovered: [String: Int] = [:]
        public var listed = 0
        public var pages = 0
        /// API calls by outcome (`ok`, `unavailable`, `refused`).
        public var calls: [String: Int] = [:]
        /// Per history (its name): the checkpoint's position after the last completed pass.
        public var positions: [String: Date] = [:]
    }

    private let configuration: Configuration
    private let histories: [any StoreHistory]
    private let store: any ReconciliationRepository
    private let producer: KafkaProducer
    private let context: StageContext
    private let clock: C
    /// This process's name on the leases.
    private let owner = "reconciler-\(UUID().uuidString.lowercased())"
    private let state = Mutex<(stopped: Bool, totals: Totals)>((false, Totals()))

    public init(configuration: Configuration, histories: [any StoreHistory], store: any ReconciliationRepository, producer: KafkaProducer,
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
    public func reconcileOnce() async throws -> [String: Pass] {
        var passes: [String: Pass] = [:]
        var failure: (any Error)?
        // Each history on its own: one that fails (its store unreachable) leaves the others their pass.
        for history in histories {
            do { passes[history.name] = try await reconcile(history) } catch { failure = failure ?? error }
        }
        if let failure { throw failure }
        // What was handled before any history the stores keep is never listed again.
        let oldest = histories.map(\.kept).max() ?? 0
        _ = try await store.pruneSeenNotifications(before: context.now().addingTimeInterval(-oldest - 86_400))
        return passes
    }

    private func reconcile(_ history: any StoreHistory) async throws -> Pass {
        var pass = Pass()
        let now = context.now()
        // As the API asked, whichever process it asked (kept in the store: a following `--once` run waits too).
        if let notBefore = try await store.checkpointHeld(history.checkpoint), now < notBefore { return pass }
        let claim = try await claim(history, now: now)
        guard case .claimed(let position) = claim else {
            if case .heldByAnother(let holder, let until) = claim {
                context.logger.info("history read by another replica", ["history": history.name, "holder": holder, "until": RFC3339.format(until)])
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
            if pass.completed { state.totals.positions[history.name] = now }
        }
        if pass.recovered > 0 {
            context.logger.warning("recovered from the store's history what the pipeline never received", ["history": history.name,
                                                                                                         "recovered": pass.recovered])
        }
        return pass
    }

    /// Reads `history` from `position` (less the overlap) to `now`, holding its lease, and moves the checkpoint to `now`
    /// once every page was read.
    private func read(_ history: any StoreHistory, from position: Date?, to now: Date) async throws -> Pass {
        var pass = Pass()
        let earliest = now.addingTimeInterval(-history.kept + 60) // a store refuses a start before what it keeps
        let start = max((position ?? now.addingTimeInterval(-configuration.firstLookback)).addingTimeInterval(-configuration.overlap), earliest)
        var token: String?
        repeat {
            if pass.pages > 0 {
                try await clock.sleep(for: .milliseconds(Int64(1000 / max(configuration.callsPerSecond, 0.001))), unless: isStopped)
                // Renewed for each page; lost (the pass outlived its lease and another replica took it): that one reads on.
                guard !isStopped(), case .claimed = try await claim(history, now: context.now()) else { return pass }
            }
            let page: StoreHistoryPage
            switch await history.page(from: start, to: now, token: token, readAt: context.now()) {
            case .success(let answered):
                page = answered
                count("ok")
            case .failure(.unavailable(let why, let retryAfter)):
                count("unavailable")
                if let retryAfter {
                    let now = context.now() // to the millisecond: Apple names the time from which it answers again in milliseconds
                    try await store.holdCheckpoint(history.checkpoint, until: now.addingTimeInterval(retryAfter.seconds), now: now)
                }
                context.logger.warning("store history unavailable; the next pass resumes from the checkpoint", ["history": history.name, "reason": why])
                return pass
            case .failure(.refused(let detail)):
                count("refused")
                context.logger.error("store history refused", ["history": history.name, "detail": detail])
                return pass
            }
            pass.pages += 1
            pass.listed += page.entries.count
            pass.recovered += try await publishUnhandled(page.entries, of: history)
            token = page.nextToken
        } while token != nil
        pass.completed = try await store.advanceCheckpoint(history.checkpoint, owner: owner, to: now, now: context.now())
        return pass
    }

    private func isStopped() -> Bool { state.withLock { $0.stopped } }

    private func claim(_ history: any StoreHistory, now: Date) async throws -> CheckpointClaim {
        try await store.claimCheckpoint(history.checkpoint, owner: owner, until: now.addingTimeInterval(configuration.lease), now: now)
    }

    private func count(_ outcome: String) { state.withLock { $0.totals.calls[outcome, default: 0] += 1 } }

    /// Publishes those of `entries` the pipeline has not handled, in their order; how many. One without an id is published
    /// too (the verifier says what is wrong with it). Where the history asks, what was published is recorded as handled.
    private func publishUnhandled(_ entries: [StoreHistoryPage.Entry], of history: any StoreHistory) async throws -> Int {
        let unseen = try await store.unseenNotifications(entries.compactMap(\.id))
        var published: Set<NotificationID> = []
        var events: [any PipelineEvent] = []
        for entry in entries {
            if let id = entry.id { guard unseen.contains(id), published.insert(id).inserted else { continue } }
            events.append(entry.event)
        }
        guard !events.isEmpty else { return 0 }
        if case .publish(let messages) = try context.messages(events) {
            for result in await producer.send(contentsOf: messages) { _ = try result.get() }
        }
        if history.recordsPublished {
            let now = context.now()
            for entry in entries {
                guard let id = entry.id, published.contains(id) else { continue }
                try await store.recordNotificationSeen(id, type: type(of: entry.event).type.rawValue, at: now)
            }
        }
        state.withLock { $0.totals.recovered[history.name, default: 0] += events.count }
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

/// A store's history the reconciler reads: its decisions between two times, a page at a time, as the pipeline's events.
public protocol StoreHistory: Sendable {
    /// The history's name on logs, metrics and a pass's answer (`production`, `sandbox`, `googleplay:com.example.app`).
    var name: String { get }
    /// Its checkpoint's name in the store.
    var checkpoint: String { get }
    /// How far back the store keeps it.
    var kept: TimeInterval { get }
    /// Whether the reconciler records what it published as handled; false where the stage that handles it records it.
    var recordsPublished: Bool { get }
    /// One page between `start` and `end`; `token`: the page the previous one named; `readAt`: now, as the events' time.
    func page(from start: Date, to end: Date, token: String?, readAt: Date) async -> Result<StoreHistoryPage, StoreHistoryFailure>
}

/// One page of a store's history.
public struct StoreHistoryPage: Sendable {
    public struct Entry: Sendable {
        /// Says whether the pipeline handled it (`ReconciliationRepository.unseenNotifications`); nil: published always.
        public var id: NotificationID?
        public var event: any PipelineEvent
    }

    public var entries: [Entry]
    /// The next page's token; nil: the last page.
    public var nextToken: String?

    public init(entries: [Entry], nextToken: String?) {
        self.entries = entries
        self.nextToken = nextToken
    }
}

/// Why a page could not be read.
public enum StoreHistoryFailure: Error, Sendable, Equatable {
    /// Try again next pass, not before `retryAfter` when the store said.
    case unavailable(String, retryAfter: Duration?)
    /// The store refused the request; an operator must look.
    case refused(String)
}

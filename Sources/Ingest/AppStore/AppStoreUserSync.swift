import Foundation
import JSON
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StoreVerification
import Synchronization

/// "Sync this user", what an app's *Restore Purchases* should call: reads the App Store's transaction history of the
/// Apple account behind the newest App Store transaction the user owns (*Get Transaction History*, newest first), and
/// submits each transaction the pipeline has not recorded — or holds as a charge nobody claimed — for that user, with
/// the store's own signed transaction (`purchase.submitted`, `source: server`). The verifier verifies and records each as
/// it would an app's submission, so a purchase made on another device, or paid and never submitted, is granted once; one
/// recorded already is not submitted again. Reading stops at the first page the pipeline holds all of (what it misses is
/// newer than what it recorded), or after `maximumPages`.
///
/// Only a transaction the user owns opens the history: a user cannot name another's Apple account. Several app users may
/// share one Apple account: a transaction bound to an account token other than the user's own (the one their
/// transactions carry) is not theirs and is left alone — the submission names the user's token, so the verifier refuses
/// it too (`appAccountTokenMismatch`). One sync per user at a time in a process, and not again within `minimumInterval`
/// of one that succeeded (Apple rate-limits the API per app).
public final class AppStoreUserSync: Sendable {
    /// What a sync did.
    public struct Report: Sendable, Equatable {
        public var userId: UserID
        /// The transaction whose history was read.
        public var transactionId: TransactionID
        /// Transactions the history listed, and those of them submitted.
        public var listed: Int
        public var submitted: Int
        /// Whether every page was read (else it stopped at a page the pipeline held all of, or at `maximumPages`).
        public var complete: Bool
    }

    public enum Failure: Error, Sendable, Equatable {
        /// The user owns no App Store transaction: the app submits one first.
        case noTransaction
        /// Synced within the last `minimumInterval`, or being synced now: not before `retryAfter`.
        case tooSoon(retryAfter: Duration)
        /// The App Store could not be asked now (`AppStoreServerAPIClient.Failure.unavailable`), or refused.
        case storeUnavailable(String, retryAfter: Duration?)
        case storeRefused(String)
        /// A submission was not acknowledged by the broker.
        case publishFailed(String)
    }

    private let store: SQLPurchaseStore
    private let apis: PerApp<[AppStoreEnvironment: AppStoreServerAPIClient]>
    private let publisher: EventPublisher
    private let minimumInterval: Duration
    private let maximumPages: Int
    private let now: @Sendable () -> Date
    /// Who synced when (nil while it runs), pruned oldest first (`SyncTimes`).
    private let started = Mutex(SyncTimes())

    /// - Parameter apis: the App Store Server API of each environment: a purchase is synced through its own environment's.
    public convenience init(store: SQLPurchaseStore, apis: [AppStoreEnvironment: AppStoreServerAPIClient], publisher: EventPublisher,
                            minimumInterval: Duration = .seconds(60), maximumPages: Int = 25, now: @escaping @Sendable () -> Date = Date.init) {
        self.init(store: store, apis: PerApp(single: apis), publisher: publisher, minimumInterval: minimumInterval, maximumPages: maximumPages, now: now)
    }

    /// - Parameter apis: each App Store app's API of each environment: a user is synced through the app and environment of
    ///   the App Store purchase they were granted last.
    public init(store: SQLPurchaseStore, apis: PerApp<[AppStoreEnvironment: AppStoreServerAPIClient]>, publisher: EventPublisher,
                minimumInterval: Duration = .seconds(60), maximumPages: Int = 25, now: @escaping @Sendable () -> Date = Date.init) {
        self.store = store
        self.apis = apis
        self.publisher = publisher
        self.minimumInterval = minimumInterval
        self.maximumPages = maximumPages
        self.now = now
    }

    public func sync(_ userId: UserID) async -> Result<Report, Failure> {
        let begun = now()
        let interval = TimeInterval(minimumInterval.components.seconds)
        let refusal = started.withLock { $0.begin(userId, at: begun, interval: interval) }
        if let refusal { return .failure(.tooSoon(retryAfter: refusal)) }
        let result = await run(userId)
        // A sync that failed may be tried again at once (the store's own wait aside, which the answer names).
        let succeeded = if case .success = result { true } else { false }
        started.withLock { $0.end(userId, at: begun, succeeded: succeeded) }
        return result
    }

    private func run(_ userId: UserID) async -> Result<Report, Failure> {
        let owned: (key: PurchaseKey, environment: String?, app: AppID?, accountToken: AccountToken?)?
        do { owned = try await store.latestAppStoreTransaction(of: userId) } catch { return .failure(.storeUnavailable("the purchase store: \(error)", retryAfter: nil)) }
        guard let owned else { return .failure(.noTransaction) }
        guard let api = apis.forRecorded(app: owned.app)?.forRecorded(environment: owned.environment) else {
            return .failure(.storeRefused("no App Store Server API is configured for the \(owned.environment ?? "unknown") environment"
                                          + (owned.app.map { " of app '\($0)'" } ?? "")))
        }
        var report = Report(userId: userId, transactionId: owned.key.transactionId, listed: 0, submitted: 0, complete: false)
        var revision: String?
        for _ in 0..<maximumPages {
            let page: SignedTransactionsPage
            switch await api.transactionHistory(of: owned.key.transactionId, revision: revision, order: .descending) {
            case .success(let answered): page = answered
            case .failure(.unavailable(let detail, let retryAfter)): return .failure(.storeUnavailable(detail, retryAfter: retryAfter))
            case .failure(.refused(_, let detail)): return .failure(.storeRefused(detail))
            }
            report.listed += page.signedTransactions.count
            let submitted: Int
            do { submitted = try await submitUnrecorded(page.signedTransactions, for: userId, token: owned.accountToken) } catch {
                return .failure(.publishFailed("\(error)"))
            }
            report.submitted += submitted
            revision = page.revision
            if revision == nil { report.complete = true }
            if revision == nil || (submitted == 0 && !page.signedTransactions.isEmpty) { break }
        }
        return .success(report)
    }

    /// Submits those of `signed` the store has not recorded, or holds unclaimed, and that are not bound to an account
    /// token other than `token` (the user's); returns how many.
    private func submitUnrecorded(_ signed: [String], for userId: UserID, token: AccountToken?) async throws -> Int {
        // Read unverified, only to skip what is recorded or not the user's: the verifier verifies what is submitted.
        let named = signed.compactMap { jws -> (PurchaseKey, String)? in
            guard let payload = Base64URL.unverifiedJWSPayload(jws), let id = payload["transactionId"]?.stringValue else { return nil }
            if let bound = payload["appAccountToken"]?.stringValue.map({ AccountToken($0) }), token.map(bound.isSameAccount) != true { return nil }
            return (PurchaseKey(store: .appstore, transactionId: TransactionID(id)), jws)
        }
        let states = try await store.states(of: named.map(\.0))
        var submitted = 0
        for (key, jws) in named where states[key] == nil || states[key] == .unclaimed {
            _ = try await publisher.publish(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws, userId: userId,
                                                              submittedAt: now(), source: .server, submissionId: UUID().uuidString.lowercased(),
                                                              appAccountToken: token))
            submitted += 1
        }
        return submitted
    }
}

/// When each user last synced, for `AppStoreUserSync`'s interval: a map by user id bytes, and the order entries were
/// made in, pruned from the oldest once past the interval (amortized constant work a request), at most `capacity` users.
struct SyncTimes {
    /// When each user's last sync that succeeded began; nil while one runs.
    private var times: [UserID: Date?] = [:]
    private var order: [(user: UserID, at: Date)] = []
    private var head = 0
    static let capacity = 100_000

    /// Starts `user`'s sync at `now`, or says how long to wait.
    mutating func begin(_ user: UserID, at now: Date, interval: TimeInterval) -> Duration? {
        while head < order.count, now.timeIntervalSince(order[head].at) >= interval {
            let (old, at) = order[head]
            if case .some(.some(let last)) = times[old], last == at { times[old] = nil }
            head += 1
        }
        if head > 1_024 && head * 2 > order.count {
            order.removeFirst(head)
            head = 0
        }
        if let last = times[user] {
            guard let last else { return .seconds(1) } // one runs
            let wait = interval - now.timeIntervalSince(last)
            if wait > 0 { return .seconds(Int64(wait.rounded(.up))) }
        }
        guard times.count < Self.capacity else { return .seconds(1) }
        times[user] = .some(nil)
        return nil
    }

    /// Ends `user`'s sync begun at `begun`: remembered if it succeeded, forgotten if not.
    mutating func end(_ user: UserID, at begun: Date, succeeded: Bool) {
        guard succeeded else { times[user] = nil; return }
        times[user] = .some(begun)
        order.append((user, begun))
    }
}

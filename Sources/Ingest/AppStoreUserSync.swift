import Foundation
import JSON
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StoreVerification
import Synchronization

/// "Sync this user", what an app's *Restore Purchases* should call: reads the App Store's transaction history of the
/// Apple account behind the newest App Store transaction the user owns (*Get Transaction History*, every page), and
/// submits each transaction the pipeline has not recorded — or holds as a charge nobody claimed — for that user, with
/// the store's own signed transaction (`purchase.submitted`, `source: server`). The verifier verifies and records each as
/// it would an app's submission, so a purchase made on another device, or paid and never submitted, is granted once; one
/// recorded already is not submitted again.
///
/// Only a transaction the user owns opens the history: a user cannot name another's Apple account. One sync per user at
/// a time in a process, and not again within `minimumInterval` (Apple rate-limits the API per app).
public final class AppStoreUserSync: Sendable {
    /// What a sync did.
    public struct Report: Sendable, Equatable {
        public var userId: UserID
        /// The transaction whose history was read.
        public var transactionId: TransactionID
        /// Transactions the history listed, and those of them submitted.
        public var listed: Int
        public var submitted: Int
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
    private let apis: [AppStoreEnvironment: AppStoreServerAPIClient]
    private let publisher: EventPublisher
    private let minimumInterval: Duration
    private let now: @Sendable () -> Date
    /// When each user's last sync began (nil while it runs), by user id bytes.
    private let started = Mutex<[UserID: Date?]>([:])

    /// - Parameter apis: the App Store Server API of each environment: a purchase is synced through its own environment's.
    public init(store: SQLPurchaseStore, apis: [AppStoreEnvironment: AppStoreServerAPIClient], publisher: EventPublisher,
                minimumInterval: Duration = .seconds(60), now: @escaping @Sendable () -> Date = Date.init) {
        self.store = store
        self.apis = apis
        self.publisher = publisher
        self.minimumInterval = minimumInterval
        self.now = now
    }

    public func sync(_ userId: UserID) async -> Result<Report, Failure> {
        let begun = now()
        let interval = TimeInterval(minimumInterval.components.seconds)
        let refusal = started.withLock { started -> Failure? in
            if let last = started[userId] {
                guard let last else { return .tooSoon(retryAfter: .seconds(1)) }
                let wait = interval - begun.timeIntervalSince(last)
                if wait > 0 { return .tooSoon(retryAfter: .seconds(Int64(wait.rounded(.up)))) }
            }
            if started.count >= 100_000 { started = started.filter { $0.value.map { begun.timeIntervalSince($0) < interval } ?? true } }
            started[userId] = .some(nil)
            return nil
        }
        if let refusal { return .failure(refusal) }
        let result = await run(userId)
        // A sync that failed may be tried again at once (the store's own wait aside, which the answer names).
        started.withLock { started in
            if case .success = result { started[userId] = .some(begun) } else { started[userId] = nil }
        }
        return result
    }

    private func run(_ userId: UserID) async -> Result<Report, Failure> {
        let owned: (key: PurchaseKey, environment: String?)?
        do { owned = try await store.latestAppStoreTransaction(of: userId) } catch { return .failure(.storeUnavailable("the purchase store: \(error)", retryAfter: nil)) }
        guard let owned else { return .failure(.noTransaction) }
        let environment = owned.environment.map(AppStoreEnvironment.init(rawValue:))
        guard let api = environment.flatMap({ apis[$0] }) ?? (environment == nil && apis.count == 1 ? apis.values.first : nil) else {
            return .failure(.storeRefused("no App Store Server API is configured for the \(owned.environment ?? "unknown") environment"))
        }
        var report = Report(userId: userId, transactionId: owned.key.transactionId, listed: 0, submitted: 0)
        var revision: String?
        repeat {
            let page: SignedTransactionsPage
            switch await api.transactionHistory(of: owned.key.transactionId, revision: revision) {
            case .success(let answered): page = answered
            case .failure(.unavailable(let detail, let retryAfter)): return .failure(.storeUnavailable(detail, retryAfter: retryAfter))
            case .failure(.refused(_, let detail)): return .failure(.storeRefused(detail))
            }
            report.listed += page.signedTransactions.count
            do { report.submitted += try await submitUnrecorded(page.signedTransactions, for: userId) } catch {
                return .failure(.publishFailed("\(error)"))
            }
            revision = page.revision
        } while revision != nil
        return .success(report)
    }

    /// Submits those of `signed` the store has not recorded, or holds unclaimed; returns how many.
    private func submitUnrecorded(_ signed: [String], for userId: UserID) async throws -> Int {
        // The ids are read unverified, only to skip what is recorded: the verifier verifies what is submitted.
        let named = signed.compactMap { jws in
            Base64URL.unverifiedJWSPayload(jws)?["transactionId"]?.stringValue.map { (PurchaseKey(store: .appstore, transactionId: TransactionID($0)), jws) }
        }
        let states = try await store.states(of: named.map(\.0))
        var submitted = 0
        for (key, jws) in named where states[key] == nil || states[key] == .unclaimed {
            _ = try await publisher.publish(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws, userId: userId,
                                                              submittedAt: now(), source: .server, submissionId: UUID().uuidString.lowercased()))
            submitted += 1
        }
        return submitted
    }
}

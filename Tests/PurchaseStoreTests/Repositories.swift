import Database
import Foundation
import InMemoryPurchaseStore
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// A repository the contract tests run on, with what they read and do beyond the repository's calls: both stores have
/// these, under the same names.
protocol TestedRepository: SweepRepository, ConsumptionRequestRepository, ReconciliationRepository, SubscriptionStatusRepository {
    func balances(of userId: UserID) async throws -> [ItemCode: Int64]
    func entitlements(of userId: UserID, at now: Date) async throws -> [ItemCode: Date?]
    func holdings(of userId: UserID, at now: Date) async throws -> UserHoldings
    func grantedItems(_ key: PurchaseKey) async throws -> [GrantItem]
    func consumptionAnswer(notificationUUID: String) async throws -> ConsumptionAnswer?
    /// The kept consumption reports whose purchase is not recorded.
    func consumptionReportsWaiting() async throws -> Int
    /// Sets a user's balance of a currency, as the game does when the user spends it.
    func setBalance(of userId: UserID, _ currency: ItemCode, to amount: Int64) async throws
    /// Where the books disagree with themselves (balances and ledger, grants without purchase, finishes without grant).
    func bookMismatches() async throws -> [String]
}

extension TestedRepository {
    func entitlements(of userId: UserID) async throws -> [ItemCode: Date?] { try await entitlements(of: userId, at: Date()) }

    func dueGrantedWithToken(store: Store, deadline: TimeInterval, now: Date) async throws -> [PurchaseRecord] {
        try await dueGrantedWithToken(store: store, deadline: deadline, now: now, after: nil, limit: 500)
    }
}

extension InMemoryPurchaseStore: TestedRepository {}

extension SQLPurchaseStore: TestedRepository {
    func consumptionReportsWaiting() async throws -> Int { try await openStatistics().consumptionReportsWaiting }

    func setBalance(of userId: UserID, _ currency: ItemCode, to amount: Int64) async throws {
        _ = try await executor.run { connection in
            try connection.query("""
                INSERT INTO balances (user_id, currency, amount) VALUES ($1, $2, $3) ON CONFLICT (user_id, currency) DO UPDATE SET amount = excluded.amount
                """, [.text(userId), .text(currency), .integer(amount)])
        }
    }

    func bookMismatches() async throws -> [String] {
        let audit = try await audit()
        return audit.balanceMismatches + audit.orphanGrants.map { "\($0): grant without purchase" } + audit.finishedWithoutGrant.map { "\($0): finished without a grant" }
    }
}

/// The repositories the contract tests run on: the in-memory one always, and each SQL engine available to the run.
enum RepositoryKind: String, Sendable, CustomTestStringConvertible {
    case memory, sqlite, postgres

    var testDescription: String { rawValue }

    static var available: [RepositoryKind] {
        [.memory] + StoreEngine.available.map { $0 == .sqlite ? .sqlite : .postgres }
    }

    /// An empty repository of this kind (a fresh, migrated database for SQL).
    func fresh() async throws -> any TestedRepository {
        try await handles(1)[0]
    }

    /// `count` handles on one empty repository, as `count` workers have: SQL stores on one database, each with its own
    /// connections; the in-memory store shared (it has no connections to tell apart).
    func handles(_ count: Int) async throws -> [any TestedRepository] {
        let engine: StoreEngine
        switch self {
        case .memory:
            let store = InMemoryPurchaseStore()
            return Array(repeating: store, count: count)
        case .sqlite: engine = .sqlite
        case .postgres: engine = .postgres
        }
        let url = try await engine.freshURL()
        let stores = try (0..<count).map { _ in try SQLPurchaseStore(url: url) }
        try await stores[0].migrate()
        return stores
    }
}

import Foundation
import PipelineHarness
import Ingest
import JSON
import PurchaseDomain
import PurchaseEvents
import PurchaseStore

/// The second act played through the running workers, and its books.
extension DemoProductTypes {
    /// Sends each step and waits until its effects are in the store (a step's events depend on the last one's:
    /// a restore needs the purchase, a reversal needs the refund).
    func play(store: SQLPurchaseStore, send: ([any PipelineEvent]) async throws -> Void, say: (String) -> Void) async throws {
        func states(_ ids: [(Store, String)]) async throws -> [PurchaseState] {
            var states: [PurchaseState] = []
            for (storeName, id) in ids { states.append(try await store.lifecycleState(of: PurchaseKey(store: storeName, transactionId: TransactionID(id)))) }
            return states
        }
        try await send(try purchases())
        try await waitFor(say, "second act: entitlements finished at their grant, coins granted, the early refund remembered", timeout: 300) {
            let now = try await states([(.appstore, Self.adfree), (.appstore, Self.subscribed), (.appstore, Self.cancelled), (.appstore, Self.receipt),
                                        (.appstore, Self.reversed), (.appcoins, Self.appCoinsOrder), (.appstore, Self.refundedFirst)])
            return now == [.finished, .finished, .finished, .granted, .granted, .granted, .revokedUnseen] ? nil : "states \(now.map(\.rawValue))"
        }
        try await send(try followUps())
        try await waitFor(say, "restored under the new install, renewed, expired, consumed, the refunded purchase refused", timeout: 300) {
            let now = try await states([(.appstore, Self.renewal), (.appstore, Self.receipt), (.appstore, Self.reversed), (.appcoins, Self.appCoinsOrder),
                                        (.appstore, Self.refundedFirst)])
            let owner = try await store.purchase(PurchaseKey(store: .appstore, transactionId: TransactionID(Self.adfree)))?.userId
            let expired = try await store.entitlements(of: "subscriber-expired").isEmpty
            return now == [.finished, .finished, .finished, .finished, .revoked] && owner == "adfree-install-2" && expired
                ? nil : "states \(now.map(\.rawValue)), ad-free owner \(owner?.rawValue ?? "-"), expired \(expired)"
        }
        try await send([try refund()])
        try await waitFor(say, "refunded", timeout: 300) {
            let state = try await states([(.appstore, Self.reversed)])
            return state == [.revoked] ? nil : "state \(state.map(\.rawValue))"
        }
        try await send([try refundReversed()])
        try await waitFor(say, "the refund reversed: granted again once", timeout: 300) {
            let state = try await states([(.appstore, Self.reversed)])
            return state == [.finished] ? nil : "state \(state.map(\.rawValue))"
        }
    }

    /// Each user's holdings as the app's backend reads them (`GET /v1/users/{userId}`, signed), against `expected`:
    /// one line per user that differs.
    static func holdingsViolations(_ expected: [UserID: Holdings], ingest: String, secret: Data) async throws -> [String] {
        var violations: [String] = []
        for (user, holdings) in expected.sorted(by: { $0.key < $1.key }) {
            let (status, body) = try await UserHoldingsAPI.fetch(user.rawValue, ingest: ingest, secret: secret)
            guard status == 200, let json = JSONValue.parse(Array(body))?.objectValue else {
                violations.append("GET /v1/users/\(user) answered \(status)")
                continue
            }
            var read = Holdings()
            for (currency, amount) in json["balances"]?.objectValue ?? [:] where amount.int64Value != 0 { read.balances[currency] = amount.int64Value }
            for entitlement in json["entitlements"]?.arrayValue ?? [] {
                guard let fields = entitlement.objectValue, let name = fields["entitlement"]?.stringValue else { continue }
                read.entitlements.updateValue(fields["expiresAt"]?.stringValue.flatMap(RFC3339.parse), forKey: name)
            }
            if read != holdings { violations.append("\(user) owns \(describe(read)) by GET /v1/users, expected \(describe(holdings))") }
        }
        return violations
    }

    static func describe(_ holdings: Holdings) -> String {
        let balances = holdings.balances.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }
        let entitlements = holdings.entitlements.sorted { $0.key < $1.key }.map { "\($0.key) until \($0.value.map { RFC3339.format($0) } ?? "for good")" }
        return "[" + (balances + entitlements).joined(separator: ", ") + "]"
    }

    /// Purchases by product type and state, from the store's books.
    static func countsByType(_ audit: StoreAudit) -> JSONValue {
        var counts: [String: [String: Int64]] = [:]
        for purchase in audit.purchases.values { counts[purchase.productType.rawValue, default: [:]][purchase.state.rawValue, default: 0] += 1 }
        return .object(counts.mapValues { .object($0.mapValues(JSONValue.integer)) })
    }
}

import Foundation
import PurchaseDomain
import Testing

/// Subscription statuses on every repository: only newer information replaces what is recorded, whatever order it
/// arrives in; each value is kept as it was given; the read side shows a status to the subscription's owner once a
/// purchase of it names one, and follows the subscription when it moves to another user.
@Suite struct SubscriptionStatusContractTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_700_000)

    static func status(_ original: TransactionID = "2000", at offset: TimeInterval, willRenew: Bool = true, billingIssue: Bool = false) -> SubscriptionStatus {
        let asOf = t0.addingTimeInterval(offset)
        return SubscriptionStatus(store: .appstore, originalTransactionId: original, productId: "pass.monthly", willRenew: willRenew,
                                  billingIssueSince: billingIssue ? asOf : nil, asOf: asOf)
    }

    @Test(arguments: RepositoryKind.available) func onlyNewerInformationApplies(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        #expect(try await store.recordSubscriptionStatus(Self.status(at: 0)) == .changed(Self.status(at: 0), fields: [.productId, .willRenew]))
        #expect(try await store.recordSubscriptionStatus(Self.status(at: 0)) == .repeated(Self.status(at: 0), fields: [.productId, .willRenew]),
                "the same again: what its announcement named, recorded with it")
        let disabled = Self.status(at: 120, willRenew: false)
        #expect(try await store.recordSubscriptionStatus(disabled) == .changed(disabled, fields: [.willRenew]))
        #expect(try await store.recordSubscriptionStatus(Self.status(at: 60)) == .stale, "signed earlier, arrived later")
        #expect(try await store.subscriptionStatus(store: .appstore, originalTransactionId: "2000") == disabled, "the newer is kept")

        let failing = Self.status(at: 180, willRenew: false, billingIssue: true)
        #expect(try await store.recordSubscriptionStatus(failing) == .changed(failing, fields: [.billingIssueSince]))
        var stillFailing = Self.status(at: 240, willRenew: false, billingIssue: true)
        let unchanged = try await store.recordSubscriptionStatus(stillFailing)
        stillFailing.billingIssueSince = failing.billingIssueSince
        #expect(unchanged == .unchanged(stillFailing), "the issue keeps its first time; only the time moves on")
        #expect(try await store.recordSubscriptionStatus(Self.status(at: 200)) == .stale, "older than the time moved on to")
        #expect(try await store.subscriptionStatus(store: .appstore, originalTransactionId: "2000") == stillFailing)
    }

    /// Subscriptions whose latest period in force expired within the window with nothing heard since: not one renewed (a
    /// later period recorded), revoked, heard of after its expiry, expired outside the window, or owned by nobody.
    @Test(arguments: RepositoryKind.available) func lapsedSubscriptionsAreThoseHeardOfNeitherRenewedNorSinceTheirExpiry(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        func period(_ id: TransactionID, of original: TransactionID, user: UserID = "u", expires offset: TimeInterval, granted: Bool = true) async throws {
            let expires = Self.t0.addingTimeInterval(offset)
            let key = PurchaseKey(store: .appstore, transactionId: id)
            _ = try await store.recordVerified(PurchaseRecord(key: key, userId: user, productId: "pass.monthly", productType: .autoRenewable, quantity: 1,
                                                              purchaseTime: expires.addingTimeInterval(-30 * 86_400), environment: "Sandbox",
                                                              originalTransactionId: original, expiresDate: expires), at: Self.t0)
            if granted { _ = try await store.grant(key, items: [.entitlement("monthly", until: expires)], at: Self.t0) }
        }
        try await period("100", of: "100", expires: -2 * 86_400)                 // lapsed
        try await period("200", of: "200", expires: -3 * 86_400)                 // renewed since:
        try await period("201", of: "200", expires: 27 * 86_400)
        try await period("300", of: "300", expires: -86_400)                     // heard of since its expiry
        _ = try await store.recordSubscriptionStatus(Self.status("300", at: -3_600, willRenew: false))
        try await period("400", of: "400", expires: -86_400)                     // heard of before its expiry only: lapsed
        _ = try await store.recordSubscriptionStatus(Self.status("400", at: -2 * 86_400))
        try await period("500", of: "500", expires: -10 * 86_400)                // outside the window
        try await period("600", of: "600", expires: -86_400, granted: false)     // never in force
        try await period("700", of: "700", expires: -86_400)                     // revoked
        _ = try await store.revoke(PurchaseKey(store: .appstore, transactionId: "700"), decidedAt: Self.t0, at: Self.t0)

        let window = Self.t0.addingTimeInterval(-3 * 86_400)...Self.t0.addingTimeInterval(-3_600)
        let lapsed = try await store.lapsedSubscriptions(store: .appstore, expiredWithin: window, limit: 10)
        #expect(lapsed.map(\.originalTransactionId) == ["100", "400"], "the earliest expiry first")
        #expect(lapsed.first == LapsedSubscription(key: PurchaseKey(store: .appstore, transactionId: "100"), originalTransactionId: "100", userId: "u",
                                                   environment: "Sandbox", expiresDate: Self.t0.addingTimeInterval(-2 * 86_400), productId: "pass.monthly"))
        #expect(try await store.lapsedSubscriptions(store: .appstore, expiredWithin: window, limit: 1).count == 1)
        _ = try await store.recordSubscriptionStatus(Self.status("100", at: 0, willRenew: false))
        #expect(try await store.lapsedSubscriptions(store: .appstore, expiredWithin: window, limit: 10).map(\.originalTransactionId) == ["400"])

        // A Google Play period names its app's package and its own token, the one to ask about.
        let android = PurchaseKey(store: .googleplay, transactionId: "GPA.1..0")
        _ = try await store.recordVerified(PurchaseRecord(key: android, userId: "u", productId: "pass.monthly", productType: .autoRenewable, quantity: 1,
                                                          purchaseTime: Self.t0.addingTimeInterval(-31 * 86_400), environment: "Production",
                                                          originalTransactionId: "first-token", packageName: "com.example.coins", purchaseToken: "upgrade-token",
                                                          expiresDate: Self.t0.addingTimeInterval(-86_400)), at: Self.t0)
        _ = try await store.grant(android, items: [.entitlement("monthly", until: Self.t0.addingTimeInterval(-86_400))], at: Self.t0)
        let lapsedAndroid = try #require(try await store.lapsedSubscriptions(store: .googleplay, expiredWithin: window, limit: 10).first)
        #expect(lapsedAndroid.originalTransactionId == "first-token" && lapsedAndroid.packageName == "com.example.coins"
                && lapsedAndroid.purchaseToken == "upgrade-token" && lapsedAndroid.productId == "pass.monthly")
    }

    @Test(arguments: RepositoryKind.available) func everyValueIsKeptAsGivenAndIdentifiersAreTheirBytes(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let composed: TransactionID = "caf\u{E9}-1", decomposed: TransactionID = "cafe\u{301}-1"
        let full = SubscriptionStatus(store: .appstore, originalTransactionId: composed, productId: "pass.yearly", willRenew: false,
                                      pendingProductId: "pass.monthly", billingIssueSince: Self.t0.addingTimeInterval(-3600),
                                      gracePeriodEndsAt: Self.t0.addingTimeInterval(16 * 86_400), rawPriceIncreaseStatus: 0, rawExpirationReason: 7,
                                      rawOfferType: 3, offerIdentifier: "SPRING-'; DROP TABLE x; --", asOf: Self.t0)
        _ = try await store.recordSubscriptionStatus(full)
        #expect(try await store.subscriptionStatus(store: .appstore, originalTransactionId: composed) == full)
        #expect(try await store.subscriptionStatus(store: .appstore, originalTransactionId: decomposed) == nil, "another subscription")
        #expect(try await store.subscriptionStatus(store: .appcoins, originalTransactionId: composed) == nil, "another store")
        let other = Self.status(decomposed, at: -60)
        #expect(try await store.recordSubscriptionStatus(other) == .changed(other, fields: [.productId, .willRenew]), "not stale: another key")
    }

    @Test(arguments: RepositoryKind.available) func theOwnerReadsItOnceAPurchaseOfItIsRecorded(_ kind: RepositoryKind) async throws {
        let store = try await kind.fresh()
        let status = Self.status(at: 0, willRenew: false)
        _ = try await store.recordSubscriptionStatus(status)
        _ = try await store.recordSubscriptionStatus(Self.status("3000", at: 0))
        #expect(try await store.subscriptionStatuses(of: "alice").isEmpty, "nobody owns it yet")

        // A renewal of it, for alice: hers from then on (with her holdings); not another user's.
        let renewal = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "2001"), userId: "alice", productId: "pass.monthly",
                                     productType: .autoRenewable, quantity: 1, purchaseTime: Self.t0, originalTransactionId: "2000")
        _ = try await store.recordVerified(renewal, at: Self.t0)
        #expect(try await store.subscriptionStatuses(of: "alice") == [status])
        #expect(try await store.holdings(of: "alice", at: Self.t0).subscriptions == [status])
        #expect(try await store.subscriptionStatuses(of: "bob").isEmpty)

        // Restored by bob under `transfer`: the subscription is his now.
        _ = try await store.transfer(renewal.key, to: "bob", policy: .transfer, at: Self.t0.addingTimeInterval(60))
        #expect(try await store.subscriptionStatuses(of: "bob") == [status])
        #expect(try await store.subscriptionStatuses(of: "alice").isEmpty)
    }

    @Test(arguments: RepositoryKind.available) func workersRecordingAtOnceKeepTheNewest(_ kind: RepositoryKind) async throws {
        let handles = try await kind.handles(2)
        let (older, newer) = (Self.status(at: 0), Self.status(at: 60, willRenew: false))
        async let first = handles[0].recordSubscriptionStatus(older)
        async let second = handles[1].recordSubscriptionStatus(newer)
        let outcomes = try await [first, second]
        #expect(outcomes.contains(.changed(newer, fields: [.productId, .willRenew])) || outcomes.contains(.changed(newer, fields: [.willRenew])),
                "\(outcomes)")
        #expect(try await handles[0].subscriptionStatus(store: .appstore, originalTransactionId: "2000") == newer)
    }
}

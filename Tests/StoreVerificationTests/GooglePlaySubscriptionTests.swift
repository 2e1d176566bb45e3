import Foundation
import PurchaseDomain
import StoreFixtures
import StoreVerification
import Testing
import TestSupport

/// Google Play subscriptions (`purchases.subscriptionsv2`) against the stand-in: what each state verifies as, what a
/// period's verified purchase says, and the acknowledgement, once, whatever repeats it.
@Suite struct GooglePlaySubscriptionTests {
    static let package: PackageName = "com.example.coins"
    static let start = Date(timeIntervalSince1970: 1_764_400_000)

    static func subscription(_ state: String = "SUBSCRIPTION_STATE_ACTIVE", order: TransactionID? = "GPA.5501-0000-0000-00001..1",
                             product: ProductID = "pass.monthly", acknowledged: Bool = false, linked: PurchaseToken? = nil, test: Bool = false,
                             account: String? = nil) -> GooglePlayAPIStandIn.Subscription {
        .init(packageName: package, productId: product, state: state, latestOrderId: order, startTime: start, expiryTime: start.addingTimeInterval(30 * 86_400),
              acknowledged: acknowledged, linkedPurchaseToken: linked, test: test, obfuscatedExternalAccountId: account)
    }

    func verify(_ subscription: GooglePlayAPIStandIn.Subscription, asking product: ProductID = "pass.monthly") async throws
        -> (Result<GooglePlaySubscriptionPurchase, Rejection>, GooglePlayAPIStandIn) {
        let api = try GooglePlayAPIStandIn(purchases: [:])
        api.set("sub-tok", subscription)
        return (try await GooglePlayVerifierTests.verifier(api).verifySubscription(packageName: Self.package, productId: product, purchaseToken: "sub-tok"), api)
    }

    @Test func aPaidPeriodVerifiesAsItsOrderUntilItsExpiry() async throws {
        let account = "6F9619FF-8B86-D011-B42D-00C04FC964FF"
        let (answer, api) = try await verify(Self.subscription(linked: "old-tok", test: true, account: account))
        let purchase = try #require(answer.value)
        let verified = VerifiedPurchase(purchase)
        #expect(verified.transactionId == "GPA.5501-0000-0000-00001..1", "the period's order")
        #expect(verified.originalTransactionId == "sub-tok", "renewals share the token")
        #expect(verified.expiresDate == Self.start.addingTimeInterval(30 * 86_400) && verified.purchaseDate == Self.start)
        #expect(verified.environment == "Test" && verified.appAccountToken == AccountToken(account))
        #expect(purchase.linkedPurchaseToken == "old-tok" && !purchase.isAcknowledged)
        #expect(api.requests.last == "GET /androidpublisher/v3/applications/com.example.coins/purchases/subscriptionsv2/tokens/sub-tok")
    }

    /// Canceled (will not renew), in grace, on hold, paused and expired subscriptions verify with the expiry Google
    /// reports; a pending signup waits; one whose pending payment was canceled was never completed.
    @Test(arguments: [("SUBSCRIPTION_STATE_CANCELED", "ok"), ("SUBSCRIPTION_STATE_IN_GRACE_PERIOD", "ok"), ("SUBSCRIPTION_STATE_ON_HOLD", "ok"),
                      ("SUBSCRIPTION_STATE_EXPIRED", "ok"), ("SUBSCRIPTION_STATE_PENDING", "purchasePending retryable"),
                      ("SUBSCRIPTION_STATE_PENDING_PURCHASE_CANCELED", "purchaseNotCompleted")])
    func eachStateIsJudged(_ state: String, _ expected: String) async throws {
        let (answer, _) = try await verify(Self.subscription(state, order: state.hasPrefix("SUBSCRIPTION_STATE_PENDING") ? nil : "GPA.1..0"))
        let outcome = switch answer {
        case .success: "ok"
        case .failure(let rejection): rejection.reason.rawValue + (rejection.isRetryable ? " retryable" : "")
        }
        #expect(outcome == expected)
    }

    @Test func aTokenOfAnotherProductOrNoLongerValidIsRefused() async throws {
        let (other, _) = try await verify(Self.subscription(), asking: "gold.monthly")
        #expect(other.rejection?.reason == .storeRejected && other.rejection?.detail.contains("'pass.monthly'") == true)
        let api = try GooglePlayAPIStandIn(purchases: [:])
        api.set("sub-tok", Self.subscription())
        api.invalidate("sub-tok")
        let gone = try await GooglePlayVerifierTests.verifier(api).verifySubscription(packageName: Self.package, productId: "pass.monthly", purchaseToken: "sub-tok")
        #expect(gone.rejection?.reason == .storeRejected && gone.rejection?.isRetryable == false)
    }

    /// The acknowledgement is made once; a repeat (Google answers 400) reads the subscription and succeeds when it is
    /// acknowledged, and a pending one stays refused.
    @Test func theAcknowledgementIsMadeOnceAndRepeatsSucceed() async throws {
        let api = try GooglePlayAPIStandIn(purchases: [:])
        api.set("sub-tok", Self.subscription())
        api.set("pending-tok", Self.subscription("SUBSCRIPTION_STATE_PENDING", order: nil))
        let client = try GooglePlayVerifierTests.client(api)
        for _ in 0..<2 {
            let answer = await client.acknowledgeSubscription(packageName: Self.package, productId: "pass.monthly", purchaseToken: "sub-tok")
            guard case .success = answer else { Issue.record("\(answer)"); return }
        }
        #expect(api.subscriptionAcknowledgeCount("sub-tok") == 1)
        #expect(api.requests.contains("POST /androidpublisher/v3/applications/com.example.coins/purchases/subscriptions/pass.monthly/tokens/sub-tok:acknowledge"))
        let pending = await client.acknowledgeSubscription(packageName: Self.package, productId: "pass.monthly", purchaseToken: "pending-tok")
        guard case .failure(.refused(400, _)) = pending else { Issue.record("\(pending)"); return }
    }
}

/// What each `subscriptionsv2` state tells a backend to message its subscriber (`subscription.status`), from the
/// stand-in's answers.
@Suite struct GooglePlaySubscriptionStatusTests {
    static let readAt = GooglePlaySubscriptionTests.start.addingTimeInterval(40 * 86_400)

    func status(_ subscription: GooglePlayAPIStandIn.Subscription) async throws -> SubscriptionStatus {
        let (answer, _) = try await GooglePlaySubscriptionTests().verify(subscription)
        let purchase = try #require(answer.value)
        return try #require(SubscriptionStatus(googlePlaySubscription: VerifiedPurchase(purchase), asOf: Self.readAt))
    }

    @Test func eachStateSaysWhatItMeansForTheSubscriber() async throws {
        var subscription = GooglePlaySubscriptionTests.subscription()
        let active = try await status(subscription)
        #expect(active.store == .googleplay && active.originalTransactionId == "sub-tok" && active.productId == "pass.monthly")
        #expect(active.willRenew == true && active.billingIssueSince == nil && active.gracePeriodEndsAt == nil && active.pausedUntil == nil)
        #expect(active.asOf == Self.readAt && active.expirationReason == nil)

        subscription.state = "SUBSCRIPTION_STATE_IN_GRACE_PERIOD"
        let grace = try await status(subscription)
        #expect(grace.willRenew == true && grace.billingIssueSince == Self.readAt)
        #expect(grace.gracePeriodEndsAt == subscription.expiryTime, "Google moves the expiry to the grace period's end")

        subscription.state = "SUBSCRIPTION_STATE_ON_HOLD"
        let hold = try await status(subscription)
        #expect(hold.billingIssueSince == Self.readAt && hold.gracePeriodEndsAt == nil, "access is lost on hold; the billing issue goes on")

        subscription.state = "SUBSCRIPTION_STATE_PAUSED"
        subscription.autoResumeTime = Self.readAt.addingTimeInterval(14 * 86_400)
        let paused = try await status(subscription)
        #expect(paused.pausedUntil == subscription.autoResumeTime && paused.billingIssueSince == nil)

        for (cancellation, reason) in [("userInitiatedCancellation", SubscriptionStatus.ExpirationReason.customerCancelled),
                                       ("systemInitiatedCancellation", .billingError), ("replacementCancellation", .other)] {
            subscription.state = "SUBSCRIPTION_STATE_CANCELED"
            subscription.cancellation = cancellation
            let canceled = try await status(subscription)
            #expect(canceled.willRenew == false && canceled.expirationReason == reason && canceled.pausedUntil == nil, "\(cancellation)")
        }
        subscription.state = "SUBSCRIPTION_STATE_EXPIRED"
        subscription.cancellation = nil
        let expired = try await status(subscription)
        #expect(expired.willRenew == false && expired.expirationReason == nil)
    }

    /// A one-time product's answer tells no subscription status.
    @Test func aOneTimePurchaseHasNone() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["tok-1": GooglePlayVerifierTests.purchase()])
        let purchase = try #require(await GooglePlayVerifierTests.verifier(api).verify(packageName: GooglePlayVerifierTests.package, productId: "coins.100",
                                                                                     purchaseToken: "tok-1").value)
        #expect(SubscriptionStatus(googlePlaySubscription: VerifiedPurchase(purchase), asOf: Self.readAt) == nil)
    }
}

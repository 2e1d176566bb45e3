import Foundation
import PurchaseDomain
import StoreFixtures
import StoreVerification
import Testing

/// The Stripe Checkout verifier against the stand-in Stripe API in the test process (`StripeAPIStandIn`), over real HTTP:
/// which sessions verify, into which purchases, and why the others do not.
@Suite struct StripeVerifierTests {
    static let coins = StripeAPIStandIn.LineItem(priceId: "price_coins100", productId: "prod_coins100", quantity: 3, unitAmount: 199)
    static let gems = StripeAPIStandIn.LineItem(priceId: "price_gems", productId: "prod_gems", unitAmount: 999, currency: "usd")
    /// Stripe's docs' own example product prices are listed by the game; `price_other` by the second app.
    static let apps: [AppID: Set<String>] = ["game": ["price_coins100", "price_gems", "prod_monthly"], "other": ["price_other"]]

    static func session(user: String? = "user-17", status: String = "complete", payment: String = "paid", mode: String = "payment",
                        items: [StripeAPIStandIn.LineItem] = [coins], metadata: [String: String] = [:]) -> StripeAPIStandIn.Session {
        .init(status: status, paymentStatus: payment, mode: mode, clientReferenceId: user, metadata: metadata, lineItems: items,
              created: Date(timeIntervalSince1970: 1_764_400_000))
    }

    static func verifier(_ api: StripeAPIStandIn, key: String? = nil, identity: StripeVerifier.ProductIdentity = .price,
                         timeout: Duration = .seconds(10)) throws -> StripeVerifier {
        try StripeVerifier(configuration: .init(apps: apps, productIdentity: identity),
                           api: StripeAPIClient(configuration: .init(baseURL: api.baseURL, secretKey: key ?? api.secretKey, timeout: timeout)))
    }

    @Test func aPaidSessionVerifiesAsOnePurchasePerLineItem() async throws {
        let session = Self.session(items: [Self.coins, Self.gems])
        let api = try StripeAPIStandIn(sessions: [session])
        let checkout = try await Self.verifier(api).verifyCheckoutSession(session.id, user: "user-17").get()
        #expect(checkout.app == "game")
        let purchases = checkout.purchases(store: .appcoins) // the wiring passes Stripe's own case
        #expect(purchases.map(\.store) == [.appcoins, .appcoins])
        #expect(purchases.map(\.transactionId) == ["\(session.id).\(Self.coins.id)", "\(session.id).\(Self.gems.id)"])
        #expect(purchases.map(\.originalTransactionId) == purchases.map(\.transactionId), "a one-time purchase is its own original")
        #expect(purchases.map(\.productId) == ["price_coins100", "price_gems"])
        #expect(purchases.map(\.quantity) == [3, 1])
        #expect(purchases.map(\.currency) == ["USD", "USD"])
        #expect(purchases.map(\.price) == [5970, 9990], "the line's total in milliunits: 3 × 1.99 USD, 9.99 USD")
        #expect(purchases.map(\.environment) == ["Test", "Test"])
        #expect(purchases.first?.purchaseDate == Date(timeIntervalSince1970: 1_764_400_000))
        #expect(purchases.first?.raw["line_item"]?.objectValue?["id"]?.stringValue == Self.coins.id)
        #expect(purchases.first?.raw["payment_intent"]?.stringValue == session.paymentIntentId, "expanded objects kept as their ids")
        #expect(api.requests == ["GET /v1/checkout/sessions/\(session.id)?expand%5B%5D=line_items&expand%5B%5D=payment_intent&expand%5B%5D=subscription"])
        // The same session read again gives the same transaction ids.
        let again = try await Self.verifier(api).verifyCheckoutSession(session.id, user: "user-17").get().purchases(store: .appcoins)
        #expect(again.map(\.transactionId) == purchases.map(\.transactionId))
    }

    @Test func theProductCanBeTheStripeProductRatherThanThePrice() async throws {
        let session = Self.session()
        let api = try StripeAPIStandIn(sessions: [session])
        let checkout = try await Self.verifier(api, identity: .product).verifyCheckoutSession(session.id, user: "user-17").get()
        #expect(checkout.purchases(store: .appcoins).map(\.productId) == ["prod_coins100"])
    }

    /// More line items than the session embeds are read page by page, `starting_after` the last of the one before.
    @Test func lineItemsBeyondTheEmbeddedOnesAreReadPageByPage() async throws {
        let items = (0..<250).map { StripeAPIStandIn.LineItem(id: "li_\($0)", priceId: "price_gems", productId: "prod_gems") }
        let session = Self.session(items: items)
        let api = try StripeAPIStandIn(sessions: [session])
        let purchases = try await Self.verifier(api).verifyCheckoutSession(session.id, user: "user-17").get().purchases(store: .appcoins)
        #expect(purchases.count == 250)
        #expect(Set(purchases.map(\.transactionId)).count == 250)
        #expect(purchases.last?.transactionId == "\(session.id).li_249")
        #expect(api.requests.dropFirst() == ["GET /v1/checkout/sessions/\(session.id)/line_items?limit=100&starting_after=li_9",
                                             "GET /v1/checkout/sessions/\(session.id)/line_items?limit=100&starting_after=li_109",
                                             "GET /v1/checkout/sessions/\(session.id)/line_items?limit=100&starting_after=li_209"])
    }

    @Test func aSessionNeedingNoPaymentVerifies() async throws {
        let session = Self.session(payment: "no_payment_required")
        let api = try StripeAPIStandIn(sessions: [session])
        #expect(try await Self.verifier(api).verifyCheckoutSession(session.id, user: "user-17").value != nil)
    }

    /// `complete` and `unpaid`: a payment method that settles later. Pending (asked again) until its payment intent
    /// fails; `open` and `expired` sessions were never completed.
    @Test func unpaidOpenAndExpiredSessionsAreNotGranted() async throws {
        let pending = Self.session(payment: "unpaid")
        var failed = Self.session(payment: "unpaid")
        failed.paymentIntentStatus = "requires_payment_method"
        let open = Self.session(status: "open", payment: "unpaid")
        let expired = Self.session(status: "expired", payment: "unpaid")
        let setup = Self.session(mode: "setup")
        let api = try StripeAPIStandIn(sessions: [pending, failed, open, expired, setup])
        let verifier = try Self.verifier(api)
        let waiting = try #require(await verifier.verifyCheckoutSession(pending.id, user: "user-17").rejection)
        #expect(waiting.reason == .purchasePending && waiting.isRetryable)
        for (session, reason) in [(failed, RejectionReason.purchaseNotCompleted), (open, .purchaseNotCompleted), (expired, .purchaseNotCompleted),
                                  (setup, .storeRejected)] {
            let rejection = try #require(await verifier.verifyCheckoutSession(session.id, user: "user-17").rejection)
            #expect(rejection.reason == reason && !rejection.isRetryable, "\(session.status) \(session.paymentStatus) \(session.mode): \(rejection)")
        }
        // The delayed payment settles: the same session verifies.
        var settled = pending
        settled.paymentStatus = "paid"
        api.set(settled)
        #expect(await verifier.verifyCheckoutSession(pending.id, user: "user-17").value != nil)
    }

    /// The session's user is the submitting user byte for byte: not another, not another Unicode spelling of the same
    /// name, not none. The metadata names the user where `client_reference_id` does not.
    @Test func theSessionMustBeTheSubmittingUsers() async throws {
        let composed = Self.session(user: "jos\u{E9}")
        let none = Self.session(user: nil)
        let byMetadata = Self.session(user: nil, metadata: ["user_id": "user-17"])
        let api = try StripeAPIStandIn(sessions: [composed, none, byMetadata])
        let verifier = try Self.verifier(api)
        #expect("jose\u{301}" == "jos\u{E9}", "Swift takes them as equal")
        #expect(await verifier.verifyCheckoutSession(composed.id, user: UserID("jose\u{301}")).rejection?.reason == .wrongUser)
        #expect(await verifier.verifyCheckoutSession(composed.id, user: "user-17").rejection?.reason == .wrongUser)
        #expect(await verifier.verifyCheckoutSession(composed.id, user: UserID("jos\u{E9}")).value != nil)
        #expect(await verifier.verifyCheckoutSession(none.id, user: "user-17").rejection?.reason == .wrongUser)
        #expect(await verifier.verifyCheckoutSession(byMetadata.id, user: "user-17").value != nil)
        #expect(await verifier.verifyCheckoutSession(byMetadata.id, user: "user-18").rejection?.reason == .wrongUser)
    }

    /// A price no app of the deployment sells, or prices of two apps in one session, are refused; a price listed by two
    /// apps is a configuration that cannot be built.
    @Test func onlyPricesOfOneOfTheDeploymentsAppsAreGranted() async throws {
        let foreign = Self.session(items: [.init(priceId: "price_someone_elses", productId: "prod_x")])
        let mixed = Self.session(items: [Self.coins, .init(priceId: "price_other", productId: "prod_o")])
        let lookalike = Self.session(items: [.init(priceId: "price_gems\u{200B}", productId: "prod_y")])
        let api = try StripeAPIStandIn(sessions: [foreign, mixed, lookalike])
        let verifier = try Self.verifier(api)
        for session in [foreign, mixed, lookalike] {
            let rejection = try #require(await verifier.verifyCheckoutSession(session.id, user: "user-17").rejection)
            #expect(rejection.reason == .wrongPackage && !rejection.isRetryable, "\(rejection)")
        }
        let client = StripeAPIClient(configuration: .init(baseURL: api.baseURL, secretKey: api.secretKey))
        #expect(throws: VerifierConfigurationError.self) { try StripeVerifier(configuration: .init(apps: ["a": ["price_1"], "b": ["price_1"]]), api: client) }
    }

    /// A subscription's session: each line item's original transaction is the subscription, its period ends with the
    /// subscription's current period (read from its items, as API versions from 2025-03-31 put it).
    @Test func aSubscriptionSessionNamesItsSubscription() async throws {
        var session = Self.session(mode: "subscription", items: [.init(priceId: "price_monthly", productId: "prod_monthly", recurring: true)])
        session.currentPeriodEnd = Date(timeIntervalSince1970: 1_767_000_000)
        let api = try StripeAPIStandIn(sessions: [session])
        let purchase = try #require(try await Self.verifier(api, identity: .product).verifyCheckoutSession(session.id, user: "user-17").get()
            .purchases(store: .appcoins).first)
        let subscription = try #require(session.subscriptionId)
        #expect(purchase.originalTransactionId == TransactionID(subscription))
        #expect(purchase.transactionId != purchase.originalTransactionId)
        #expect(purchase.expiresDate == Date(timeIntervalSince1970: 1_767_000_000))
        #expect(purchase.productId == "prod_monthly")
    }

    /// An id that is not a Stripe id is refused before any request; an unknown one is Stripe's 404, permanent.
    @Test func unknownAndInvalidSessionIdsAreRefused() async throws {
        let api = try StripeAPIStandIn()
        let verifier = try Self.verifier(api)
        for id in ["../events", "cs_test_a/b", "", "cs_test_é", String(repeating: "a", count: 256)] {
            let rejection = try #require(await verifier.verifyCheckoutSession(id, user: "user-17").rejection)
            #expect(rejection.reason == .storeRejected && !rejection.isRetryable)
        }
        #expect(api.requests.isEmpty)
        let unknown = try #require(await verifier.verifyCheckoutSession("cs_test_unknown", user: "user-17").rejection)
        #expect(unknown.reason == .storeRejected && !unknown.isRetryable)
        #expect(unknown.detail.contains("No such checkout.session"), "\(unknown.detail)")
    }

    /// A key Stripe refuses is the deployment's fault, not the purchase's: retryable, so that the purchase waits for the
    /// key to be mended instead of being refused to the buyer who paid.
    @Test func aRefusedKeyIsTheDeploymentsFaultNotThePurchases() async throws {
        let session = Self.session()
        let api = try StripeAPIStandIn(sessions: [session])
        let rejection = try #require(try await Self.verifier(api, key: "sk_test_wrong0000000000000000").verifyCheckoutSession(session.id, user: "user-17").rejection)
        #expect(rejection.reason == .storeUnavailable && rejection.isRetryable)
        #expect(rejection.detail.contains("Stripe refused the secret key"), "\(rejection.detail)")
        #expect(rejection.detail.contains("Invalid API Key provided"), "Stripe's message kept: \(rejection.detail)")
        #expect(!rejection.detail.contains("sk_test_wrong0000000000000000"), "the key itself is not in what is logged")
        let client = StripeAPIClient(configuration: .init(baseURL: api.baseURL, secretKey: "sk_test_wrong0000000000000000"))
        guard case .failure(.unavailable(let why, _)) = await client.checkoutSession(session.id), why.contains("HTTP 401") else {
            Issue.record("a refused key is unavailable until an operator fixes it")
            return
        }
    }

    /// Stripe's rate limit and its servers' faults may pass: retryable, not before `Retry-After` when Stripe says.
    @Test(arguments: [(429, 7 as Int?), (500, nil), (502, nil), (503, 30), (409, nil)])
    func rateLimitsAndServerFaultsAreRetryable(_ status: Int, _ retryAfter: Int?) async throws {
        let session = Self.session()
        let api = try StripeAPIStandIn(sessions: [session])
        api.fail(status, retryAfter: retryAfter, times: 1)
        let client = StripeAPIClient(configuration: .init(baseURL: api.baseURL, secretKey: api.secretKey))
        guard case .failure(.unavailable(_, let after)) = await client.checkoutSession(session.id) else {
            Issue.record("HTTP \(status) is unavailable")
            return
        }
        #expect(after == retryAfter.map { .seconds($0) })
        if retryAfter != nil {
            // The wait holds every call of the client until its time, the stand-in not asked meanwhile.
            let asked = api.requests.count
            guard case .failure(.unavailable(let why, let remaining)) = await client.checkoutSession(session.id) else {
                Issue.record("a call during Stripe's wait is held")
                return
            }
            #expect(why.contains("asked to wait") && (remaining ?? .zero) > .zero && api.requests.count == asked, "\(why)")
        } else {
            #expect(await client.checkoutSession(session.id).value != nil, "answered again once the fault passed")
        }
        let fresh = StripeAPIClient(configuration: .init(baseURL: api.baseURL, secretKey: api.secretKey))
        #expect(await fresh.checkoutSession(session.id).value != nil, "answered again once the fault passed")
        api.fail(status)
        let rejection = try #require(try await Self.verifier(api).verifyCheckoutSession(session.id, user: "user-17").rejection)
        #expect(rejection.reason == .storeUnavailable && rejection.isRetryable)
    }

    @Test func anUnreachableAPIIsRetryable() async throws {
        let client = StripeAPIClient(configuration: .init(baseURL: URL(string: "http://127.0.0.1:1")!, secretKey: "sk_test_x", timeout: .seconds(1)))
        let verifier = try StripeVerifier(configuration: .init(apps: Self.apps), api: client)
        let rejection = try #require(await verifier.verifyCheckoutSession("cs_test_1", user: "user-17").rejection)
        #expect(rejection.reason == .storeUnavailable && rejection.isRetryable)
    }

    /// 400 is a refusal of the request with Stripe's message; other 4xx too.
    @Test func aBadRequestIsRefused() async throws {
        let session = Self.session()
        let api = try StripeAPIStandIn(sessions: [session])
        let client = StripeAPIClient(configuration: .init(baseURL: api.baseURL, secretKey: api.secretKey))
        guard case .failure(.refused(400, let detail)) = await client.get("checkout/sessions/\(session.id)/line_items", query: [("limit", "1000")]) else {
            Issue.record("a limit out of range is refused")
            return
        }
        #expect(detail.contains("invalid_request_error") && detail.contains("limit"), "\(detail)")
    }
}

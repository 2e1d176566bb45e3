import Crypto
import Foundation
import JSON
import PurchaseDomain
import StoreFixtures
import StoreVerification
import Synchronization
import Testing
import TestSupport

/// Runs the Google Play client against the stand-in Android Publisher API and token endpoint in the test process
/// (`GooglePlayAPIStandIn`), which answer as Google documents: the purchase of a known token, 404 for an unknown one,
/// 410 for one no longer valid, 401 for an expired access token, 400 for an acknowledge or consume the purchase's state
/// does not allow, and injected failures.
@Suite struct GooglePlayVerifierTests {
    static let package: PackageName = "com.example.coins"

    static func purchase(state: Int = 0, consumed: Int = 0, acknowledged: Int = 0, type: Int? = nil, quantity: Int = 1, account: String? = nil,
                         answering product: ProductID? = nil) -> GooglePlayAPIStandIn.Purchase {
        .init(packageName: package, productId: "coins.100", orderId: "GPA.3301-2211-0042-55100", purchaseState: state, consumptionState: consumed,
              acknowledgementState: acknowledged, purchaseType: type, quantity: quantity, obfuscatedExternalAccountId: account,
              purchaseTime: Date(timeIntervalSince1970: 1_764_400_000), answeredProductId: product)
    }

    /// The client of `api`, authenticated with the stand-in's service account key file.
    static func client(_ api: GooglePlayAPIStandIn, timeout: Duration = .seconds(10)) throws -> AndroidPublisherClient {
        let keyFile = try #require(FileManager.default.contents(atPath: try api.writeServiceAccountKeyFile()))
        return AndroidPublisherClient(configuration: .init(baseURL: api.baseURL, timeout: timeout), serviceAccount: try GoogleServiceAccount(keyFile: keyFile))
    }

    static func verifier(_ api: GooglePlayAPIStandIn, apps: [PackageName: PublicKey] = [:]) throws -> GooglePlayVerifier {
        GooglePlayVerifier(configuration: .init(apps: apps), api: try client(api))
    }

    @Test func aPaidPurchaseVerifiesWithTheServiceAccountsToken() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["tok-1": Self.purchase(quantity: 3)])
        let purchase = try #require(await Self.verifier(api).verify(packageName: Self.package, productId: "coins.100", purchaseToken: "tok-1").value)
        #expect(purchase.transactionId == "GPA.3301-2211-0042-55100")
        #expect(purchase.purchaseTime == Date(timeIntervalSince1970: 1_764_400_000))
        #expect(purchase.quantity == 3)
        #expect(!purchase.isConsumed && !purchase.isAcknowledged)
        let verified = VerifiedPurchase(purchase)
        #expect(verified.store == .googleplay && verified.quantity == 3 && verified.environment == "Production")
        #expect(verified.originalTransactionId == "tok-1")
        #expect(api.requests == ["POST /token", "GET /androidpublisher/v3/applications/com.example.coins/purchases/products/coins.100/tokens/tok-1"])
    }

    @Test func theAccessTokenIsReusedAndReplacedOnceWhenRefused() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["tok-1": Self.purchase()])
        let verifier = try Self.verifier(api)
        for _ in 0..<3 { _ = try #require(await verifier.verify(packageName: Self.package, productId: "coins.100", purchaseToken: "tok-1").value) }
        #expect(api.tokenRequests == 1, "one token for every call while it is valid")
        api.expireTokens()
        _ = try #require(await verifier.verify(packageName: Self.package, productId: "coins.100", purchaseToken: "tok-1").value)
        #expect(api.tokenRequests == 2, "a 401 obtains a new token and the call is made again")
    }

    /// Calls at start, all needing a token while none is cached, share one exchange at the token endpoint (single flight),
    /// however slow it answers.
    @Test func concurrentCallsAtStartMakeOneTokenRequest() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["tok-1": Self.purchase()])
        api.stallTokenEndpoint(for: .milliseconds(200))
        let verifier = try Self.verifier(api)
        let verified = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<16 {
                group.addTask { await verifier.verify(packageName: Self.package, productId: "coins.100", purchaseToken: "tok-1").value != nil }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(verified == 16)
        #expect(api.tokenRequests == 1, "one exchange for the sixteen calls")
    }

    /// An hour's token is renewed five minutes before it expires (`renewalMargin`), never sent expired.
    @Test func theTokenIsRenewedFiveMinutesBeforeItExpires() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["tok-1": Self.purchase()], tokenLifetime: .seconds(3600))
        // The service account's clock, from 3,200 s ago: the stand-in takes assertions issued up to now (and 300 s ahead).
        let start = Date().addingTimeInterval(-3200)
        let clock = Mutex(start)
        let account = try GoogleServiceAccount(keyFile: Data(try api.serviceAccountKeyJSON().utf8), now: { clock.withLock { $0 } })
        let client = AndroidPublisherClient(configuration: .init(baseURL: api.baseURL), serviceAccount: account)
        func call(at offset: TimeInterval) async throws {
            clock.withLock { $0 = start.addingTimeInterval(offset) }
            _ = try #require(await client.productPurchase(packageName: Self.package, productId: "coins.100", purchaseToken: "tok-1").value)
        }
        try await call(at: 0)
        try await call(at: 3600 - GoogleServiceAccount.renewalMargin - 1)
        #expect(api.tokenRequests == 1, "still well within its hour")
        try await call(at: 3600 - GoogleServiceAccount.renewalMargin + 1)
        #expect(api.tokenRequests == 2, "renewed with five minutes left")
        #expect(GoogleServiceAccount.renewalMargin == 300)
    }

    @Test func aTokenEndpointThatRefusesLeavesThePurchaseRetryable() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["tok-1": Self.purchase()])
        api.failTokenEndpoint(400)
        let rejection = try #require(await Self.verifier(api).verify(packageName: Self.package, productId: "coins.100", purchaseToken: "tok-1").rejection)
        #expect(rejection.reason == .storeUnavailable && rejection.isRetryable, "the pipeline's credentials say nothing about the purchase")
    }

    @Test func aTestPurchaseIsRecordedInTheTestEnvironmentAndAnAccountIdBindsOnlyAsAUUID() async throws {
        let token = "5D3A0F0E-8A7C-4C1E-9D57-00000000A11C"
        let api = try GooglePlayAPIStandIn(purchases: ["test": Self.purchase(type: 0, account: token), "hashed": Self.purchase(account: "a1b2c3")])
        let verifier = try Self.verifier(api)
        let test = VerifiedPurchase(try #require(await verifier.verify(packageName: Self.package, productId: "coins.100", purchaseToken: "test").value))
        #expect(test.environment == "Test")
        #expect(test.appAccountToken == AccountToken(token))
        let hashed = VerifiedPurchase(try #require(await verifier.verify(packageName: Self.package, productId: "coins.100", purchaseToken: "hashed").value))
        #expect(hashed.appAccountToken == nil, "a hash of the user id binds nothing")
    }

    @Test(arguments: [(2, RejectionReason.purchasePending, true), (1, .purchaseNotCompleted, false)])
    func pendingAndCanceledAreVerdictsOfTheirOwn(_ state: Int, _ reason: RejectionReason, _ retryable: Bool) async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["tok-1": Self.purchase(state: state)])
        let rejection = try #require(await Self.verifier(api).verify(packageName: Self.package, productId: "coins.100", purchaseToken: "tok-1").rejection)
        #expect(rejection.reason == reason && rejection.isRetryable == retryable)
    }

    @Test func unknownAndNoLongerValidTokensAndAnotherProductAreRefused() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["gone": Self.purchase(), "other": Self.purchase(answering: "coins.1000")])
        api.invalidate("gone")
        let verifier = try Self.verifier(api)
        for token: PurchaseToken in ["unknown", "gone", "other"] {
            let rejection = try #require(await verifier.verify(packageName: Self.package, productId: "coins.100", purchaseToken: token).rejection)
            #expect(rejection.reason == .storeRejected && !rejection.isRetryable, "\(token)")
        }
    }

    @Test(arguments: [429, 500, 503, 403])
    func unavailableAnswersAreRetryable(_ status: Int) async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["tok-1": Self.purchase()])
        api.fail(status, retryAfter: 30)
        let client = try Self.client(api)
        let answer = await client.productPurchase(packageName: Self.package, productId: "coins.100", purchaseToken: "tok-1")
        guard case .failure(.unavailable(_, let retryAfter)) = answer else { Issue.record("expected unavailable, got \(answer)"); return }
        #expect(retryAfter == .seconds(30))
    }

    /// A 429's `Retry-After` holds every call of the client, whatever it asks (a subscription, the voided purchases),
    /// until the time: none is made, each told what is left of the wait.
    @Test func aRateLimitHoldsEveryCallOfTheAPIUntilItsTime() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["tok-1": Self.purchase()])
        let client = try Self.client(api)
        api.fail(429, retryAfter: 30)
        _ = await client.productPurchase(packageName: Self.package, productId: "coins.100", purchaseToken: "tok-1")
        api.fail(nil)
        let made = api.requests.count
        let held: [StoreAPIFailure?] = [
            await client.subscriptionPurchase(packageName: Self.package, productId: nil, purchaseToken: "tok-1").failure,
            await client.voidedPurchases(packageName: Self.package, from: Date().addingTimeInterval(-3600), to: Date()).failure,
            await client.acknowledge(packageName: Self.package, productId: "coins.100", purchaseToken: "tok-1").failure,
        ]
        for failure in held {
            guard case .unavailable(let why, let wait?)? = failure else { Issue.record("expected held: \(String(describing: failure))"); continue }
            #expect(why.hasPrefix("Android Publisher API asked to wait") && wait <= .seconds(30) && wait > .seconds(25), "\(why) \(wait)")
        }
        #expect(api.requests.count == made, "no call before the time the API named")
    }

    @Test func aHungAPITimesOutRetryably() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["tok-1": Self.purchase()])
        api.stall("tok-1", for: .seconds(3))
        let client = try Self.client(api, timeout: .milliseconds(300))
        guard case .failure(.unavailable) = await client.productPurchase(packageName: Self.package, productId: "coins.100", purchaseToken: "tok-1") else {
            Issue.record("expected unavailable"); return
        }
    }

    @Test func namesThatAreNotOnePathSegmentAreRefusedWithoutARequest() async throws {
        let api = try GooglePlayAPIStandIn(purchases: [:])
        let client = try Self.client(api)
        for token: PurchaseToken in ["", ".", "..", "a/b"] {
            #expect(await client.productPurchase(packageName: Self.package, productId: "coins.100", purchaseToken: token).failure == .refused(status: 0, detail: "invalid purchase token"))
        }
        #expect(api.requests.isEmpty)
    }

    @Test func tokensAreSentPercentEncodedAndComparedByBytes() async throws {
        let composed = "caf\u{E9}+tok", decomposed = "cafe\u{301}+tok" // Equal as Swift Strings, different bytes.
        let api = try GooglePlayAPIStandIn(purchases: [PurchaseToken(composed): Self.purchase()])
        let verifier = try Self.verifier(api)
        #expect(await verifier.verify(packageName: Self.package, productId: "coins.100", purchaseToken: PurchaseToken(composed)).value != nil)
        #expect(await verifier.verify(packageName: Self.package, productId: "coins.100", purchaseToken: PurchaseToken(decomposed)).rejection?.reason == .storeRejected)
    }

    @Test func acknowledgeAndConsumeHappenOnceAndARepeatSucceeds() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["pass": Self.purchase(), "coins": Self.purchase()])
        let client = try Self.client(api)
        for _ in 0..<2 {
            #expect(await client.acknowledge(packageName: Self.package, productId: "coins.100", purchaseToken: "pass").failure == nil)
            #expect(await client.consume(packageName: Self.package, productId: "coins.100", purchaseToken: "coins").failure == nil)
        }
        #expect(api.acknowledgeCount("pass") == 1 && api.consumeCount("coins") == 1)
        #expect(api.purchase("pass")?.acknowledgementState == 1 && api.purchase("coins")?.consumptionState == 1)
    }

    @Test func consumingAPendingPurchaseIsRefused() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["pending": Self.purchase(state: 2)])
        let answer = await (try Self.client(api)).consume(packageName: Self.package, productId: "coins.100", purchaseToken: "pending")
        guard case .failure(.refused(400, _)) = answer else { Issue.record("expected refused 400, got \(answer)"); return }
        #expect(api.consumeCount("pending") == 0)
    }

    /// A token Google does not take (`400`, reason `invalid`, `Invalid Value`) is refused for good, naming Google's
    /// reason: verification is a permanent rejection, and an acknowledge, consume or subscription acknowledge is refused
    /// at once, without reading the purchase again as a 400 about its state is.
    @Test func anInvalidValueIsAPermanentRefusalWithItsReason() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["bad": Self.purchase()])
        api.malform("bad")
        let client = try Self.client(api)
        let rejection = try #require(await GooglePlayVerifier(configuration: .init(apps: [:]), api: client)
            .verify(packageName: Self.package, productId: "coins.100", purchaseToken: "bad").failure)
        #expect(rejection.reason == .storeRejected && !rejection.isRetryable)
        #expect(rejection.detail.contains("HTTP 400 invalid: Invalid Value"), "\(rejection.detail)")
        let before = api.requests.count
        let answers = [await client.acknowledge(packageName: Self.package, productId: "coins.100", purchaseToken: "bad"),
                       await client.consume(packageName: Self.package, productId: "coins.100", purchaseToken: "bad"),
                       await client.acknowledgeSubscription(packageName: Self.package, productId: "pass.monthly", purchaseToken: "bad")]
        for answer in answers {
            guard case .failure(let failure) = answer, case .refused(400, let detail) = failure else { Issue.record("expected refused 400, got \(answer)"); continue }
            #expect(failure.isInvalidValue && detail == "HTTP 400 invalid: Invalid Value")
        }
        #expect(api.requests.count == before + 3, "one call each, no re-read: \(api.requests.dropFirst(before))")
    }
}

/// What is checked before the API is asked: the app, its key's signature over the purchase data, the names it signs.
@Suite struct GooglePlaySignedPurchaseTests {
    @Test func onlyTheConfiguredAppsSignedPurchaseDataNamingTheSubmissionIsAsked() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["tok-1": GooglePlayVerifierTests.purchase()])
        let signer = try GooglePlaySigner(), other = try GooglePlaySigner()
        let key = try PublicKey(subjectPublicKeyInfo: Data(try signer.publicKeyBase64().utf8))
        let verifier = try GooglePlayVerifierTests.verifier(api, apps: [GooglePlayVerifierTests.package: key])
        let signed = try signer.sign(packageName: "com.example.coins", productId: "coins.100", purchaseToken: "tok-1", orderId: "GPA.3301-2211-0042-55100")
        let forged = try other.sign(packageName: "com.example.coins", productId: "coins.100", purchaseToken: "tok-1", orderId: "GPA.3301-2211-0042-55100")
        let elsewhere = try signer.sign(packageName: "com.example.coins", productId: "coins.100", purchaseToken: "tok-2", orderId: "GPA.3301-2211-0042-55100")
        func verify(_ package: PackageName, _ data: (purchaseData: String, signature: String)) async -> Result<GooglePlayProductPurchase, Rejection> {
            await verifier.verifySigned(packageName: package, productId: "coins.100", purchaseToken: "tok-1", purchaseData: data.purchaseData, signature: data.signature)
        }
        #expect(await verify("com.example.coins", signed).value?.transactionId == "GPA.3301-2211-0042-55100")
        #expect(await verify("com.example.other", signed).rejection?.reason == .wrongPackage)
        #expect(await verify("com.example.coins", forged).rejection?.reason == .badSignature)
        #expect(await verify("com.example.coins", elsewhere).rejection?.reason == .malformedPayload)
        #expect(await verify("com.example.coins", (signed.purchaseData, "not base64")).rejection?.reason == .badSignature)
        #expect(api.requests.filter { $0.hasPrefix("GET") }.count == 1, "only the genuine submission reached the API")
    }
}

/// The service account's key file: what is refused, naming the field.
@Suite struct GoogleServiceAccountTests {
    @Test func aKeyFileIsRefusedNamingWhatIsWrong() throws {
        let api = try GooglePlayAPIStandIn(purchases: [:])
        let good = try #require(JSONValue.parse(Array(try api.serviceAccountKeyJSON().utf8))?.objectValue)
        _ = try GoogleServiceAccount(keyFile: Data(JSONValue.object(good).serializedText.utf8))
        let ecKey = try PrivateKey.generateP256().pemRepresentation()
        for (field, value, expected) in [("type", JSONValue.string("authorized_user"), "\"type\""), ("client_email", .null, "client_email"),
                                         ("private_key", .string(ecKey), "private_key"), ("private_key", .string("x"), "private_key"),
                                         ("token_uri", .string("not a url"), "token_uri")] {
            var fields = good
            fields[field] = value
            #expect(throws: GooglePlayConfigurationError.self) { try GoogleServiceAccount(keyFile: Data(JSONValue.object(fields).serializedText.utf8)) }
            do { _ = try GoogleServiceAccount(keyFile: Data(JSONValue.object(fields).serializedText.utf8)) } catch {
                #expect("\(error)".contains(expected), "\(error)")
            }
        }
        #expect(throws: GooglePlayConfigurationError.self) { try GoogleServiceAccount(keyFile: Data("[]".utf8)) }
    }
}

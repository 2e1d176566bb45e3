import PurchaseDomain
import Crypto
import Foundation
import StoreFixtures
import StoreVerification
import Testing
import TestSupport

/// Runs the AppCoins client against the stand-in API in the test process (`AppCoinsAPIStandIn`), which answers as
/// the AppCoins API documents: the purchase for a known token, 404 for an unknown one, and injected failures.
@Suite struct AppCoinsVerifierTests {
    /// The shared stand-in with `purchases` by token, and the client of this suite (its timeout `timeout`).
    static func api(_ purchases: [PurchaseToken: AppCoinsAPIStandIn.Purchase]) throws -> AppCoinsAPIStandIn { try AppCoinsAPIStandIn(purchases: purchases) }

    static func verifier(_ api: AppCoinsAPIStandIn, timeout: Duration = .seconds(10)) -> AppCoinsVerifier {
        AppCoinsVerifier(configuration: .init(baseURL: api.baseURL, timeout: timeout))
    }

    static func purchase(state: Int = 0, consumed: Int = 0, answering product: ProductID? = nil, payload: String = "user-17") -> AppCoinsAPIStandIn.Purchase {
        .init(packageName: "com.example.coins", sku: "coins.100", orderId: "catappult.inapp.purchase.ABCDEF", purchaseState: state,
              consumptionState: consumed, purchaseTime: Date(timeIntervalSince1970: 1_764_400_000), developerPayload: payload, answeredProductId: product)
    }

    /// `developerPayload` is the developer's own text: it binds the purchase to an account (`appAccountToken`) only when
    /// it is an account token, a UUID. Unity's JSON or an order id bind nothing (a submission naming its user's token
    /// would otherwise be refused `appAccountTokenMismatch`).
    @Test(arguments: [("5D3A0F0E-8A7C-4C1E-9D57-00000000A11C", true), ("user-17", false), ("order-2291", false),
                      (#"{"developerPayload":"x","isFreeTrial":false,"hasIntroductoryPriceTrial":false,"isUpdated":false}"#, false)])
    func onlyAUUIDPayloadIsAnAccountToken(_ payload: String, _ isToken: Bool) async throws {
        let api = try Self.api(["tok-1": Self.purchase(payload: payload)])
        let purchase = try #require(await Self.verifier(api).verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "tok-1").value)
        #expect(purchase.developerPayload == payload, "kept as the store said it")
        #expect(VerifiedPurchase(purchase).appAccountToken == (isToken ? AccountToken(payload) : nil))
    }

    @Test func aPaidPurchaseVerifies() async throws {
        let api = try Self.api(["tok-1": Self.purchase()])
        let purchase = try #require(await Self.verifier(api).verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "tok-1").value)
        #expect(purchase.transactionId == "catappult.inapp.purchase.ABCDEF")
        #expect(purchase.purchaseTime == Date(timeIntervalSince1970: 1_764_400_000))
        #expect(!purchase.isConsumed)
        #expect(purchase.developerPayload == "user-17")
        #expect(VerifiedPurchase(purchase).consumed == false)
        #expect(api.requests == ["/productv2/8.20250505/google/inapp/v3/applications/com.example.coins/purchases/products/coins.100/tokens/tok-1"])
    }

    @Test func consumptionStateIsReported() async throws {
        let api = try Self.api(["tok-1": Self.purchase(consumed: 1)])
        #expect(await Self.verifier(api).verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "tok-1").value?.isConsumed == true)
    }

    @Test(arguments: [404, 410])
    func unknownPurchasesArePermanentRejections(_ status: Int) async throws {
        let api = try Self.api(["gone": Self.purchase()])
        api.fail(410, token: "gone")
        let token = status == 404 ? "unknown" : "gone"
        let rejection = try #require(await Self.verifier(api).verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: PurchaseToken(token)).rejection)
        #expect(rejection.reason == .storeRejected)
        #expect(!rejection.isRetryable)
    }

    @Test(arguments: [429, 500, 502, 503])
    func serverErrorsAreRetryable(_ status: Int) async throws {
        let api = try Self.api(["t": Self.purchase()])
        api.fail(status)
        let rejection = try #require(await Self.verifier(api).verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "t").rejection)
        #expect(rejection.reason == .storeUnavailable)
        #expect(rejection.isRetryable)
    }

    @Test func aTimeoutIsRetryable() async throws {
        let api = try Self.api(["slow": Self.purchase()])
        api.stall("slow", for: .seconds(3)) // longer than the client's timeout
        let rejection = try #require(await Self.verifier(api, timeout: .seconds(1)).verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "slow").rejection)
        #expect(rejection.reason == .storeUnavailable && rejection.isRetryable)
    }

    @Test func anUnreachableAPIIsRetryable() async throws {
        let verifier = AppCoinsVerifier(configuration: .init(baseURL: URL(string: "http://127.0.0.1:1")!, timeout: .seconds(1)))
        let rejection = try #require(await verifier.verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "t").rejection)
        #expect(rejection.reason == .storeUnavailable && rejection.isRetryable)
    }

    @Test func canceledPendingAndMismatchedPurchasesAreRejected() async throws {
        let api = try Self.api(["canceled": Self.purchase(state: 1), "pending": Self.purchase(state: 2), "other": Self.purchase(answering: "coins.5000")])
        let verifier = Self.verifier(api)
        let canceled = try #require(await verifier.verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "canceled").rejection)
        #expect(canceled.reason == .purchaseNotCompleted && !canceled.isRetryable)
        let pending = try #require(await verifier.verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "pending").rejection)
        #expect(pending.reason == .purchasePending && pending.isRetryable, "a verdict of its own: submit again once it settles")
        let other = try #require(await verifier.verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "other").rejection)
        #expect(other.reason == .storeRejected)
    }

    /// Only the operator's apps, and only purchase data their key signed naming what is claimed, reach the store's
    /// API; the SKU of an app of someone else's grants nothing.
    /// The submission names what the app's key signed, byte for byte: the same SKU in another Unicode form (é decomposed)
    /// is not the signed one. And no name is a path segment that moves the request elsewhere.
    @Test func theSignedNamesAreComparedByteForByteAndNoneIsADotSegment() async throws {
        let signer = try AppCoinsSigner()
        let api = try AppCoinsAPIStandIn(purchases: ["tok-1": .init(packageName: "com.example.coins", sku: "caf\u{E9}.100", orderId: "o-1")])
        let key = try PublicKey(subjectPublicKeyInfo: Data(try signer.publicKeyBase64().utf8))
        let verifier = AppCoinsVerifier(configuration: .init(baseURL: api.baseURL, apps: ["com.example.coins": key]))
        let signed = try signer.sign(packageName: "com.example.coins", sku: "caf\u{E9}.100", purchaseToken: "tok-1", orderId: "o")
        let decomposed = "cafe\u{301}.100"
        #expect(decomposed == "caf\u{E9}.100", "Swift takes them as equal")
        #expect(ProductID(decomposed) != "caf\u{E9}.100", "identifiers do not")
        #expect(await verifier.verifySigned(packageName: "com.example.coins", sku: ProductID(decomposed), purchaseToken: "tok-1", purchaseData: signed.purchaseData,
                                            signature: signed.signature).rejection?.reason == .malformedPayload)
        let genuine = await verifier.verifySigned(packageName: "com.example.coins", sku: "caf\u{E9}.100", purchaseToken: "tok-1",
                                                  purchaseData: signed.purchaseData, signature: signed.signature)
        #expect(genuine.value != nil, "\(String(describing: genuine.rejection)) \(api.requests)")
        for dots in [".", ".."] {
            #expect(await verifier.verify(packageName: "com.example.coins", sku: ProductID(dots), purchaseToken: "tok-1").rejection?.reason == .storeRejected)
        }
        #expect(api.requests.count == 1, "\(api.requests)")
    }

    @Test func onlyTheOperatorsAppsSignedByTheirKeyAreAskedAbout() async throws {
        let signer = try AppCoinsSigner()
        let forger = try AppCoinsSigner()
        let api = try AppCoinsAPIStandIn(purchases: [
            "tok-1": .init(packageName: "com.example.coins", sku: "coins.100", orderId: "o-1"),
            "tok-x": .init(packageName: "com.attacker.app", sku: "coins.100", orderId: "o-x"),
            "tok-p": .init(packageName: "com.example.coins", sku: "coins.100", orderId: "o-p", purchaseState: 2),
        ])
        let key = try PublicKey(subjectPublicKeyInfo: Data(try signer.publicKeyBase64().utf8))
        let verifier = AppCoinsVerifier(configuration: .init(baseURL: api.baseURL, apps: ["com.example.coins": key]))
        func verify(_ package: String, _ token: String, by who: AppCoinsSigner, claiming claimed: String? = nil) async throws -> Result<AppCoinsPurchase, Rejection> {
            let signed = try who.sign(packageName: package, sku: "coins.100", purchaseToken: token, orderId: "o")
            return await verifier.verifySigned(packageName: PackageName(package), sku: "coins.100", purchaseToken: PurchaseToken(claimed ?? token),
                                               purchaseData: signed.purchaseData, signature: signed.signature)
        }
        #expect(try await verify("com.example.coins", "tok-1", by: signer).value?.orderId == "o-1")
        #expect(try await verify("com.attacker.app", "tok-x", by: forger).rejection?.reason == .wrongPackage)
        #expect(try await verify("com.example.coins", "tok-1", by: forger).rejection?.reason == .badSignature)
        #expect(try await verify("com.example.coins", "tok-1", by: signer, claiming: "tok-p").rejection?.reason == .malformedPayload,
                "a signature for one purchase does not vouch for another")
        let pending = try await verify("com.example.coins", "tok-p", by: signer).rejection
        #expect(pending?.reason == .purchasePending && pending?.isRetryable == true)
        #expect(api.requests.count == 2, "only the two correctly signed purchases of the operator's app reached the API: \(api.requests)")
        // A SHA-256 signature is accepted as well.
        let data = try signer.sign(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "tok-1", orderId: "o").purchaseData
        let sha256 = try signer.key.signRSA(Data(data.utf8), digest: .sha256).base64EncodedString()
        #expect(await verifier.verifySigned(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "tok-1", purchaseData: data,
                                            signature: sha256).value != nil)
    }
}

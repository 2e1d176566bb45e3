import Crypto
import Foundation
@testable import HTTPClient
import PurchaseDomain
import StoreFixtures
import StoreVerification
import Testing
import TestSupport

/// What the store clients tell their observer: one outcome per HTTP call made (`StoreAPIOutcome`), none for a request
/// refused before it was sent. Real clients against the stand-in APIs in the test process.
@Suite struct StoreAPICallTests {
    /// Counts the outcomes its observer is told of.
    final class Calls: Sendable {
        let counts = Locked<[StoreAPIOutcome: Int]>([:])
        var observer: StoreAPIObserver { { [counts] outcome in counts.withLock { $0[outcome, default: 0] += 1 } } }
        var value: [StoreAPIOutcome: Int] { counts.value }
    }

    @Test(arguments: [(200, StoreAPIOutcome.ok), (202, .ok), (204, .ok), (429, .rateLimited), (401, .unauthorized), (403, .unauthorized),
                      (404, .notFound), (410, .notFound), (400, .clientError), (408, .clientError), (409, .clientError), (499, .clientError),
                      (500, .serverError), (502, .serverError), (503, .serverError), (599, .serverError), (301, .serverError), (100, .serverError)])
    func anAnswerIsClassedByItsStatus(_ status: Int, _ outcome: StoreAPIOutcome) {
        #expect(StoreAPIOutcome(.success(HTTPClient.Response(status: status, body: [], retryAfter: nil))) == outcome)
    }

    @Test func noAnswerIsUnreachable() {
        #expect(StoreAPIOutcome(.failure(HTTPClient.Failure("Timeout was reached"))) == .unreachable)
    }

    static func appCoinsPurchase() -> AppCoinsAPIStandIn.Purchase { .init(packageName: "com.example.coins", sku: "coins.100", orderId: "o-1") }

    @Test func eachAppCoinsCallIsToldByItsOutcome() async throws {
        let api = try AppCoinsAPIStandIn(purchases: ["paid": Self.appCoinsPurchase(), "limited": Self.appCoinsPurchase(), "down": Self.appCoinsPurchase(),
                                                     "locked": Self.appCoinsPurchase()])
        api.fail(429, token: "limited")
        api.fail(503, token: "down")
        api.fail(401, token: "locked")
        let calls = Calls()
        let verifier = AppCoinsVerifier(configuration: .init(baseURL: api.baseURL, observer: calls.observer))
        for token in ["paid", "paid", "limited", "down", "locked", "unknown"] {
            _ = await verifier.verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: PurchaseToken(token))
        }
        #expect(await verifier.verify(packageName: "com.example.coins", sku: "..", purchaseToken: "paid").rejection?.reason == .storeRejected)
        let unreachable = AppCoinsVerifier(configuration: .init(baseURL: URL(string: "http://127.0.0.1:1")!, timeout: .seconds(1), observer: calls.observer))
        _ = await unreachable.verify(packageName: "com.example.coins", sku: "coins.100", purchaseToken: "paid")
        #expect(calls.value == [.ok: 2, .rateLimited: 1, .serverError: 1, .unauthorized: 1, .notFound: 1, .unreachable: 1],
                "one per request sent, none for the name that cannot be sent")
        #expect(api.requests.count == 6)
    }

    /// Google's token endpoint counts beside the API: a refused access token is one call, its replacement two more.
    @Test func googlePlayCallsCountTheTokenEndpointAndTheRetryOfARefusedToken() async throws {
        let api = try GooglePlayAPIStandIn(purchases: ["tok-1": GooglePlayVerifierTests.purchase()])
        let calls = Calls()
        let keyFile = try #require(FileManager.default.contents(atPath: try api.writeServiceAccountKeyFile()))
        let client = AndroidPublisherClient(configuration: .init(baseURL: api.baseURL, observer: calls.observer),
                                            serviceAccount: try GoogleServiceAccount(keyFile: keyFile, observer: calls.observer))
        func read() async -> Result<GooglePlayProductPurchase, AndroidPublisherClient.Failure> {
            await client.productPurchase(packageName: GooglePlayVerifierTests.package, productId: "coins.100", purchaseToken: "tok-1")
        }
        #expect((try? await read().get()) != nil)                   // token ok, GET ok
        api.expireTokens()
        #expect((try? await read().get()) != nil)                   // GET 401, token ok, GET ok
        api.fail(503)
        #expect((try? await read().get()) == nil)                   // GET 503
        api.fail(nil)
        api.expireTokens()
        api.failTokenEndpoint(400)
        #expect((try? await read().get()) == nil)                   // GET 401, token 400
        #expect(calls.value == [.ok: 4, .unauthorized: 2, .serverError: 1, .clientError: 1], "\(api.requests)")
        #expect(api.requests.count == 8)
    }

    /// A batch of Finish Transaction calls: one outcome per request sent, whatever the batch's size.
    @Test func eachCallOfAnAppStoreBatchIsTold() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try AppStoreServerAPIClientTests.standIn(publicKey: try key.publicKey())
        let calls = Calls()
        let client = AppStoreServerAPIClient(configuration: .init(baseURL: appStore.baseURL, keyId: "KEY123", issuerId: "issuer-uuid",
                                                                  bundleId: "com.example.coins", privateKey: key, observer: calls.observer))
        let answers = await client.finishTransactions((1...20).map { TransactionID("300000\($0)") } + ["not/an/id"])
        #expect(answers.filter { (try? $0.get()) != nil }.count == 20)
        #expect(calls.value == [.ok: 20], "the invalid id is refused without a call")
        appStore.fail(.init(status: 429))
        _ = await client.finishTransaction("3000001")
        #expect(calls.value == [.ok: 20, .rateLimited: 1])
    }
}

import PurchaseDomain
import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPServer
import JSON
import StoreFixtures
import StoreVerification
import Synchronization
import Testing
import TestSupport

/// The App Store Server API as the test process plays it: it checks the bearer token's ES256 signature
/// with the developer key's public half and its claims, as Apple documents them.
@Suite struct AppStoreServerAPIClientTests {
    /// The shared stand-in, with this suite's key id, issuer and bundle.
    static func standIn(publicKey: PublicKey, failWith: Int? = nil) throws -> AppStoreServerAPIStandIn {
        try AppStoreServerAPIStandIn(publicKey: publicKey, keyId: "KEY123", issuerId: "issuer-uuid", bundleId: "com.example.coins", failWith: failWith)
    }

    func client(_ server: HTTPServer, key: PrivateKey) -> AppStoreServerAPIClient {
        AppStoreServerAPIClient(configuration: .init(baseURL: URL(string: "http://127.0.0.1:\(server.port)")!, keyId: "KEY123",
                                                     issuerId: "issuer-uuid", bundleId: "com.example.coins", privateKey: key))
    }

    @Test func finishesWithASignedToken() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try Self.standIn(publicKey: try key.publicKey())
        let result = await client(appStore.server, key: key).finishTransaction("2000000123")
        #expect(throws: Never.self) { try result.get() }
        #expect(appStore.finished == ["2000000123"])
        #expect(appStore.lastClaims["bid"] == .string("com.example.coins"))
    }

    @Test func aTokenServesManyRequestsAndIsRenewedAtHalfItsLifetime() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try Self.standIn(publicKey: try key.publicKey())
        let clock = Locked(Date(timeIntervalSince1970: 1_800_000_000))
        let client = AppStoreServerAPIClient(configuration: .init(baseURL: URL(string: "http://127.0.0.1:\(appStore.server.port)")!, keyId: "KEY123",
                                                                  issuerId: "issuer-uuid", bundleId: "com.example.coins", privateKey: key,
                                                                  tokenLifetime: 600), now: { clock.value })
        var issuedAt: [JSONValue?] = []
        for step in [0.0, 299, 1, 10, -400] { // seconds the clock moves before each call; the last one goes back
            clock.value = clock.value.addingTimeInterval(step)
            let result = await client.finishTransaction("1")
            #expect(throws: Never.self) { try result.get() }
            issuedAt.append(appStore.lastClaims["iat"])
        }
        let t0 = Int64(1_800_000_000)
        #expect(issuedAt == [.integer(t0), .integer(t0), .integer(t0 + 300), .integer(t0 + 300), .integer(t0 - 90)],
                "reused until half the lifetime, renewed then, and renewed when the clock went back before its issue")
    }

    /// A batch's calls: each answered in its place; an invalid id refused without a request, the others finished once.
    @Test func aBatchOfFinishesIsAnsweredInItsOrder() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try Self.standIn(publicKey: try key.publicKey())
        var ids: [TransactionID] = (1...20).map { "200000\($0)" }
        ids.insert("not/an/id", at: 5)
        let results = await client(appStore.server, key: key).finishTransactions(ids)
        #expect(results.count == 21)
        #expect(results[5].failure == .refused(status: 0, detail: "invalid transaction id"))
        #expect(results.enumerated().filter { $0.offset != 5 }.allSatisfy { (try? $0.element.get()) != nil })
        #expect(appStore.finished.sorted() == ids.filter { $0 != "not/an/id" }.sorted())
    }

    @Test func aTokenFromAnotherKeyIsRefusedAndThatIsRetryable() async throws {
        let appStore = try Self.standIn(publicKey: try PrivateKey.generateP256().publicKey())
        let result = await client(appStore.server, key: try PrivateKey.generateP256()).finishTransaction("1")
        guard case .failure(.unavailable) = result else { Issue.record("expected unavailable, got \(result)"); return }
        #expect(appStore.finished.isEmpty)
    }

    @Test func anUnknownTransactionIsRefusedPermanently() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try Self.standIn(publicKey: try key.publicKey(), failWith: 404)
        let result = await client(appStore.server, key: key).finishTransaction("404")
        #expect(result.failure == .refused(status: 404, detail: "Transaction id not found. (errorCode 4040010)"))
    }

    @Test func serverErrorsAreRetryable() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try Self.standIn(publicKey: try key.publicKey(), failWith: 503)
        let result = await client(appStore.server, key: key).finishTransaction("1")
        #expect(result.failure == .unavailable("App Store Server API answered HTTP 503"))
    }

    /// The harness injects outages on demand: a failure answers as many requests as it was given, then the API
    /// answers as documented again; each finish is recorded with the time it arrived.
    @Test func injectedFailuresAnswerTheirCountThenTheAPIFinishesAgain() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try Self.standIn(publicKey: try key.publicKey())
        // The client's clock, moved past the wait the API asks for before it is asked again (a minute: longer than a loaded
        // machine takes between the calls).
        let ahead = Mutex<TimeInterval>(0)
        let client = AppStoreServerAPIClient(configuration: .init(baseURL: appStore.baseURL, keyId: "KEY123", issuerId: "issuer-uuid",
                                                                  bundleId: "com.example.coins", privateKey: key),
                                             now: { Date().addingTimeInterval(ahead.withLock { $0 }) })
        appStore.fail(.init(status: 429, times: 2, retryAfterSeconds: 60))
        var request = URLRequest(url: appStore.baseURL.appendingPathComponent("inApps/v1/transactions/1/finish"))
        request.httpMethod = "POST"
        request.setValue("Bearer " + (try client.token()), forHTTPHeaderField: "Authorization")
        let asked = Date()
        let (body, response) = try await URLSession.shared.data(for: request)
        let answered = Date()
        let limited = try #require(response as? HTTPURLResponse)
        // Apple's Retry-After is the UNIX time in milliseconds from which requests are accepted again.
        let resumesAt = try #require(limited.value(forHTTPHeaderField: "Retry-After").flatMap { Double($0) }.map { $0 / 1000 })
        #expect(limited.statusCode == 429)
        #expect(resumesAt >= asked.timeIntervalSince1970 + 59.99 && resumesAt <= answered.timeIntervalSince1970 + 60.01)
        #expect(String(decoding: body, as: UTF8.self) == #"{"errorCode":4290000,"errorMessage":"Rate limit exceeded."}"#)
        let calling = Date()
        let failure = await client.finishTransaction("1").failure
        let elapsed = Date().timeIntervalSince(calling)
        guard case .unavailable(let why, let wait?)? = failure else {
            Issue.record("a 429 is unavailable, with the wait it asked for: \(String(describing: failure))")
            return
        }
        #expect(why == "App Store Server API answered HTTP 429")
        #expect(wait <= .seconds(60) && wait >= .milliseconds(Int64((60 - elapsed) * 1000) - 10),
                "the wait the API asked for travels with the failure: \(wait)")
        guard case .unavailable(let held, _)? = await client.finishTransaction("1").failure, held.hasPrefix("App Store Server API asked to wait") else {
            Issue.record("a call while the wait runs is not made")
            return
        }
        #expect(appStore.requests.count == 2, "held: no request")
        ahead.withLock { $0 = 61 }
        let before = Date()
        let finished = await client.finishTransaction("1")
        #expect(throws: Never.self) { try finished.get() }
        #expect(appStore.finished == ["1"], "the two refused calls finished nothing")
        #expect(appStore.finishTimes["1"]?.count == 1 && appStore.finishTimes["1"]!.allSatisfy { $0 >= before })
        #expect(appStore.requests.count == 3)
    }

    /// `Retry-After` as Apple sends it (a time in milliseconds) becomes the wait until then; a wait in seconds stays one.
    @Test func retryAfterIsReadAsAppleWritesIt() {
        let now = Date(timeIntervalSince1970: 1_765_000_000)
        #expect(AppStoreServerAPIClient.wait(.seconds(1_765_000_030_000), now: now) == .seconds(30))
        #expect(AppStoreServerAPIClient.wait(.seconds(1_764_999_990_000), now: now) == .zero, "a time past: no wait")
        #expect(AppStoreServerAPIClient.wait(.seconds(1_765_000_000), now: now) == .seconds(3600), "a time in seconds: an hour at most")
        #expect(AppStoreServerAPIClient.wait(.seconds(1_865_000_000_000), now: now) == .seconds(3600), "years ahead: an hour at most")
        #expect(AppStoreServerAPIClient.wait(.seconds(120), now: now) == .seconds(120))
        #expect(AppStoreServerAPIClient.wait(nil, now: now) == nil)
    }
}

extension AppStoreServerAPIClientTests {
    @Test func consumptionInformationIsPutAsTheAPIDocumentsIt() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try Self.standIn(publicKey: try key.publicKey())
        let client = client(appStore.server, key: key)
        let sent = await client.sendConsumptionInformation("2000000777", ConsumptionRequest(
            customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false, consumptionPercentage: 100_000))
        #expect(throws: Never.self) { try sent.get() }
        let recorded = appStore.consumptions
        #expect(recorded.map(\.transactionId) == ["2000000777"])
        #expect(recorded.first?.body == ["customerConsented": .bool(true), "deliveryStatus": .string("DELIVERED"), "sampleContentProvided": .bool(false),
                                         "consumptionPercentage": .integer(100_000)])

        let undelivered = await client.sendConsumptionInformation("2000000778", ConsumptionRequest(
            customerConsented: true, deliveryStatus: .undeliveredOther, sampleContentProvided: false, consumptionPercentage: 50_000))
        #expect(undelivered.failure == .refused(status: 0, detail: "consumptionPercentage must be 0…100000, and 0 unless delivered"),
                "a share consumed of what was not delivered is refused before it is sent")
        let badStatus = await client.sendConsumptionInformation("2000000779", ConsumptionRequest(
            customerConsented: true, deliveryStatus: .init(rawValue: "LOST"), sampleContentProvided: false))
        #expect(badStatus.failure == .refused(status: 400, detail: "Invalid request. (errorCode 4000036)"))

        let withoutConsent = await client.sendConsumptionInformation("2000000780", ConsumptionRequest(
            customerConsented: false, deliveryStatus: .delivered, sampleContentProvided: false))
        guard case .failure(.refused(status: 0, _)) = withoutConsent else { Issue.record("sent without consent: \(withoutConsent)"); return }
        #expect(appStore.requests.filter { $0.hasPrefix("PUT ") } == ["PUT /inApps/v2/transactions/consumption/2000000777",
                                                                      "PUT /inApps/v2/transactions/consumption/2000000779"],
                "what the client refuses itself, and the one without consent, never reached the App Store")
    }
}

extension Result where Success == Void, Failure == AppStoreServerAPIClient.Failure {
    var failure: AppStoreServerAPIClient.Failure? { if case .failure(let failure) = self { failure } else { nil } }
}

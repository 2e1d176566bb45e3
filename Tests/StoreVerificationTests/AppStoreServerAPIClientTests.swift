import Crypto
import Foundation
import HTTPServer
import JSON
import StoreVerification
import Testing
import TestSupport

/// The App Store Server API as the test process plays it: it checks the bearer token's ES256 signature
/// with the developer key's public half and its claims, as Apple documents them.
@Suite struct AppStoreServerAPIClientTests {
    final class StandInAppStore: Sendable {
        let server: HTTPServer
        let finished = Locked<[String]>([])
        let lastClaims = Locked<[String: JSONValue]>([:])

        init(publicKey: PublicKey, failWith: Int? = nil) throws {
            let finished = self.finished
            let lastClaims = self.lastClaims
            server = try HTTPServer(synchronousHandler: { request in
                guard let auth = request.header("authorization"), auth.hasPrefix("Bearer ") else { return HTTPResponse(status: 401) }
                let parts = auth.dropFirst(7).split(separator: ".", omittingEmptySubsequences: false).map(String.init)
                guard parts.count == 3, let signature = Base64URL.decode(parts[2]),
                      publicKey.verifyES256(message: Data("\(parts[0]).\(parts[1])".utf8), rawSignature: signature),
                      let header = Base64URL.decode(parts[0]).flatMap({ JSONValue.parse(Array($0))?.objectValue }),
                      let claims = Base64URL.decode(parts[1]).flatMap({ JSONValue.parse(Array($0))?.objectValue }),
                      header["alg"] == .string("ES256"), header["kid"] == .string("KEY123"),
                      claims["aud"] == .string("appstoreconnect-v1"), claims["bid"] == .string("com.example.coins"),
                      claims["iss"] == .string("issuer-uuid"),
                      let iat = claims["iat"]?.int64Value, let exp = claims["exp"]?.int64Value, exp > iat, exp - iat <= 3600
                else { return HTTPResponse(status: 401, contentType: "application/json", body: #"{"errorCode":4010000}"#) }
                lastClaims.value = claims
                if let status = failWith { return HTTPResponse(status: status, contentType: "application/json", body: #"{"errorCode":4040010,"errorMessage":"Transaction id not found."}"#) }
                let path = request.path.split(separator: "/")
                guard request.method == "POST", path.count == 5, path[0] == "inApps", path[1] == "v1", path[2] == "transactions", path[4] == "finish" else {
                    return HTTPResponse(status: 404)
                }
                finished.withLock { $0.append(String(path[3])) }
                return HTTPResponse(status: 200)
            })
        }
    }

    func client(_ server: HTTPServer, key: PrivateKey) -> AppStoreServerAPIClient {
        AppStoreServerAPIClient(configuration: .init(baseURL: URL(string: "http://127.0.0.1:\(server.port)")!, keyId: "KEY123",
                                                     issuerId: "issuer-uuid", bundleId: "com.example.coins", privateKey: key))
    }

    @Test func finishesWithASignedToken() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try StandInAppStore(publicKey: try key.publicKey())
        let result = await client(appStore.server, key: key).finishTransaction("2000000123")
        #expect(throws: Never.self) { try result.get() }
        #expect(appStore.finished.value == ["2000000123"])
        #expect(appStore.lastClaims.value["bid"] == .string("com.example.coins"))
    }

    @Test func aTokenServesManyRequestsAndIsRenewedAtHalfItsLifetime() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try StandInAppStore(publicKey: try key.publicKey())
        let clock = Locked(Date(timeIntervalSince1970: 1_800_000_000))
        let client = AppStoreServerAPIClient(configuration: .init(baseURL: URL(string: "http://127.0.0.1:\(appStore.server.port)")!, keyId: "KEY123",
                                                                  issuerId: "issuer-uuid", bundleId: "com.example.coins", privateKey: key,
                                                                  tokenLifetime: 600), now: { clock.value })
        var issuedAt: [JSONValue?] = []
        for step in [0.0, 299, 1, 10, -400] { // seconds the clock moves before each call; the last one goes back
            clock.value = clock.value.addingTimeInterval(step)
            let result = await client.finishTransaction("1")
            #expect(throws: Never.self) { try result.get() }
            issuedAt.append(appStore.lastClaims.value["iat"])
        }
        let t0 = Int64(1_800_000_000)
        #expect(issuedAt == [.integer(t0), .integer(t0), .integer(t0 + 300), .integer(t0 + 300), .integer(t0 - 90)],
                "reused until half the lifetime, renewed then, and renewed when the clock went back before its issue")
    }

    @Test func aTokenFromAnotherKeyIsRefusedAndThatIsRetryable() async throws {
        let appStore = try StandInAppStore(publicKey: try PrivateKey.generateP256().publicKey())
        let result = await client(appStore.server, key: try PrivateKey.generateP256()).finishTransaction("1")
        guard case .failure(.unavailable) = result else { Issue.record("expected unavailable, got \(result)"); return }
        #expect(appStore.finished.value.isEmpty)
    }

    @Test func anUnknownTransactionIsRefusedPermanently() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try StandInAppStore(publicKey: try key.publicKey(), failWith: 404)
        let result = await client(appStore.server, key: key).finishTransaction("404")
        #expect(result.failure == .refused(status: 404, detail: "Transaction id not found."))
    }

    @Test func serverErrorsAreRetryable() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try StandInAppStore(publicKey: try key.publicKey(), failWith: 503)
        let result = await client(appStore.server, key: key).finishTransaction("1")
        #expect(result.failure == .unavailable("App Store Server API answered HTTP 503"))
    }
}

extension Result where Success == Void, Failure == AppStoreServerAPIClient.Failure {
    var failure: AppStoreServerAPIClient.Failure? { if case .failure(let failure) = self { failure } else { nil } }
}

import Crypto
import Foundation
import HTTPServer
import JSON
import StoreFixtures
import StoreVerification
import Synchronization
import Testing
import TestSupport

/// `iapctl appstore test-notification` against the stand-in App Store Server API, which posts the TEST notification to a
/// server in this process as the App Store posts to the URL set in App Store Connect.
@Suite struct AppStoreCommandTests {
    let key: PrivateKey
    let keyFile: URL
    let api: AppStoreServerAPIStandIn
    let pki = try! TestPKI.make(name: "test-notification")

    init() throws {
        key = try PrivateKey.generateP256()
        keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("appstore-key-\(UUID().uuidString).p8")
        try Data(try key.pemRepresentation().utf8).write(to: keyFile)
        api = try AppStoreServerAPIStandIn(publicKey: try key.publicKey(), keyId: "K1", issuerId: "I1", bundleId: "com.example.coins")
    }

    func run() async throws -> (status: Int32, fields: [String: JSONValue]) {
        let outcome = try await ExecutableProcess.run("iapctl", ["appstore", "test-notification", "--api-url", api.baseURL.absoluteString, "--key-id", "K1",
                                                                  "--issuer-id", "I1", "--private-key", keyFile.path, "--bundle-id", "com.example.coins",
                                                                  "--timeout", "20"], input: Data())
        return (outcome.status, JSONValue.parse(Array((outcome.lines.last ?? "").utf8))?.objectValue ?? [:])
    }

    /// The signed payloads a server was sent.
    final class Received: Sendable {
        let payloads = Mutex<[String]>([])
    }

    /// A server answering `status`, recording what it was sent.
    func webhook(answering status: Int) throws -> (server: HTTPServer, received: Received) {
        let received = Received()
        let server = try HTTPServer(synchronousHandler: { request in
            received.payloads.withLock { $0.append(JSONValue.parse(Array(request.body))?.objectValue?["signedPayload"]?.stringValue ?? "") }
            return HTTPResponse(status: status)
        })
        let signer = JWSSigner(pki: pki)
        api.sendTestNotifications(to: URL(string: "http://127.0.0.1:\(server.port)/v1/notifications/appstore")!) { uuid in
            try signer.sign(AppStorePayloads.notification(type: .test, uuid: uuid, bundleId: "com.example.coins", appAppleId: nil, signedTransactionInfo: nil))
        }
        return (server, received)
    }

    @Test func aTestNotificationTheServerAcceptsIsReportedDelivered() async throws {
        let (server, received) = try webhook(answering: 200)
        let (status, fields) = try await run()
        #expect(status == 0, "\(fields)")
        #expect(fields["delivered"] == .bool(true))
        #expect(fields["attempts"]?.arrayValue?.first?.objectValue?["result"] == .string("SUCCESS"))
        let payload = try #require(received.payloads.withLock { $0 }.first)
        let notification = try #require(JSONValue.parse(Array(Base64URL.decode(payload.split(separator: ".")[1]) ?? Data()))?.objectValue)
        #expect(notification["notificationType"] == .string("TEST"), "what the server got is the App Store's TEST notification")
        #expect(api.requests.contains("POST /inApps/v1/notifications/test") && api.requests.contains { $0.hasPrefix("GET /inApps/v1/notifications/test/") })
        _ = server
    }

    @Test func aTestNotificationTheServerRefusesIsReportedNotDelivered() async throws {
        let (server, _) = try webhook(answering: 500)
        let (status, fields) = try await run()
        #expect(status == 1)
        #expect(fields["delivered"] == .bool(false))
        #expect(fields["attempts"]?.arrayValue?.first?.objectValue?["result"] == .string("UNSUCCESSFUL_HTTP_RESPONSE_CODE"))
        _ = server
    }

    @Test func withoutAServerURLTheAppStoresErrorIsReported() async throws {
        let (status, fields) = try await run()
        #expect(status == 1)
        #expect(fields["error"]?.stringValue?.contains("4040007") == true, "\(fields)")
    }
}

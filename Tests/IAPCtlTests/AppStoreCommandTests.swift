import Crypto
import Foundation
import HTTPServer
import JSON
import StoreFixtures
import StoreVerification
import PurchaseDomain
import PurchaseStore
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

    /// `iapctl appstore order`: a customer's order id traced to its transactions, each verified against the test root and
    /// named with the user who owns it in the pipeline; a transaction signed by another chain is reported rejected, not
    /// trusted; an order id the App Store does not know is `invalid`.
    @Test func anOrderIdIsTracedToItsTransactionsAndTheirOwners() async throws {
        let directory = try TestDirectory("order")
        defer { directory.remove() }
        let storeURL = "sqlite:" + directory.path("store.sqlite")
        let store = try SQLPurchaseStore(url: storeURL)
        try await store.migrate()
        let owned = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "5100"), userId: "player-42", productId: "coins.100",
                                   productType: .consumable, quantity: 1, purchaseTime: Date(), app: "coins-game")
        _ = try await store.recordVerified(owned, at: Date())
        _ = try await store.grant(owned.key, items: [.currency("coins", 100)], at: Date())

        let signer = JWSSigner(pki: pki), forger = JWSSigner(pki: try TestPKI.make(name: "forger"))
        for (id, by) in [("5100", signer), ("5101", signer), ("5102", forger)] {
            let signed = try by.sign(AppStorePayloads.transaction(transactionId: id, productId: "coins.100", bundleId: "com.example.coins", environment: .production))
            api.recordTransaction(signed, transactionId: TransactionID(id), originalTransactionId: TransactionID(id), customer: "c1")
        }
        api.recordOrder("MK5TTTVWJH", transactionIds: ["5100", "5101", "5102"])
        let root = try directory.file("root.pem", pki.root.pemRepresentation)
        func order(_ id: String) async throws -> (status: Int32, fields: [String: JSONValue]) {
            let outcome = try await ExecutableProcess.run("iapctl", ["appstore", "order", id, "--store", storeURL, "--root", root, "--app-apple-id", "1234",
                                                                      "--api-url", api.baseURL.absoluteString, "--key-id", "K1", "--issuer-id", "I1",
                                                                      "--private-key", keyFile.path, "--bundle-id", "com.example.coins"], input: Data())
            return (outcome.status, JSONValue.parse(Array((outcome.lines.last ?? "").utf8))?.objectValue ?? [:])
        }

        let (status, fields) = try await order("MK5TTTVWJH")
        #expect(status == 0 && fields["status"] == .string("valid"), "\(fields)")
        let transactions = (fields["transactions"]?.arrayValue ?? []).compactMap(\.objectValue)
        #expect(transactions.count == 3)
        let first = try #require(transactions.first)
        #expect(first["transactionId"] == .string("5100") && first["productId"] == .string("coins.100"))
        #expect(first["pipeline"] == .object(["userId": .string("player-42"), "state": .string("granted"), "app": .string("coins-game")]))
        #expect(transactions.dropFirst().first?["pipeline"] == .null, "paid, never submitted: the pipeline knows no owner")
        #expect(transactions.last?["rejected"]?.objectValue?["reason"] != nil && transactions.last?["transactionId"] == nil,
                "a transaction not signed by Apple's chain is not trusted: \(transactions.last ?? [:])")

        let (unknownStatus, unknown) = try await order("NOSUCHORDR")
        #expect(unknownStatus == 1 && unknown["status"] == .string("invalid") && unknown["transactions"] == .array([]))
        let (badStatus, bad) = try await order("MK5/../x")
        #expect(badStatus == 1 && bad["error"]?.stringValue?.contains("letters and digits") == true, "\(bad)")
        #expect(!api.requests.contains { $0.contains("..") }, "a malformed order id is not sent")
    }
}

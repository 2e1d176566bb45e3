import Foundation
import JSON
import PurchaseDomain
import StoreFixtures
import Testing
import TestSupport

extension ForeignProducerTests {
    /// A Python backend written from README.md and schemas/README.md alone submits a Google Play purchase (the app's
    /// `Purchase.getOriginalJson()` and signature, signed here with the app's licensing key), waits for its grant and
    /// reads the user's holdings back from `iap-ingest`'s read side. The worker executables verify it with the stand-in
    /// Android Publisher API, grant the catalog's coins, consume it there once and finish it.
    @Test func googlePlayPurchaseFromPythonIsGrantedConsumedOnceAndReadBack() async throws {
        let servers = try TestServices.requireBrokers()
        let python = try TestServices.requirePython()
        let prefix = "gp\(UUID().uuidString.prefix(6).lowercased())."
        let create = ["topics", "create"] + Self.topics.map { prefix + $0 } + ["--partitions", "2", "--brokers", servers]
        #expect(try await VerifyCommandTests.run(create, input: "").status == 0)
        let directory = try TestDirectory("foreign-gp")
        defer { directory.remove() }
        let file = directory.file

        let package = "com.example.coins", product = "coins.100", token = "gp-python-token-1", orderId = "GPA.3372-4455-6677-88990"
        let catalogFile = TestServices.packageRoot.appendingPathComponent("schemas/examples/catalog.json")
        let catalog = try #require(JSONValue.parse(Array(try Data(contentsOf: catalogFile)))?.objectValue)
        let coins = try #require(catalog["googleplay"]?.objectValue?[product]?.objectValue?["amount"]?.int64Value, "the catalog sells \(product) on Google Play")

        let api = try GooglePlayAPIStandIn(purchases: [
            PurchaseToken(token): .init(packageName: PackageName(package), productId: ProductID(product), orderId: TransactionID(orderId)),
        ])
        let licensing = try GooglePlaySigner()
        let licensingKey = try file("googleplay.pub", try licensing.publicKeyBase64())
        let serviceAccount = try file("service-account.json", try api.serviceAccountKeyJSON())
        let googlePlayAPI = ["--googleplay-service-account", serviceAccount, "--googleplay-api-url", api.baseURL.absoluteString]
        let readSecret = try file("read.secret", "py-backend-read-secret\n") // as deployments mount it, with a newline
        let pki = try TestPKI.make()
        let root = try file("root.pem", pki.root.pemRepresentation)
        let store = "sqlite:" + directory.path("store.sqlite")
        let ingest = ["--brokers", servers, "--store", store, "--topic-prefix", prefix, "--shutdown-timeout", "5"]
        let common = ingest + ["--group-prefix", prefix] // groups of their own: other tests' workers may share the broker
        // The verifier needs the catalog too, as deployments give it: Google does not say whether a product is a consumable.
        let workers = [
            try ExecutableProcess("iap-verifier", common + ["--bundle-id", package, "--environment", "Sandbox", "--root", root, "--catalog", catalogFile.path,
                                                           "--googleplay-app", "\(package)=\(licensingKey)"] + googlePlayAPI),
            try ExecutableProcess("iap-granter", common + ["--catalog", catalogFile.path]),
            try ExecutableProcess("iap-finisher", common + googlePlayAPI),
            try ExecutableProcess("iap-ingest", ingest + ["--http-port", "0", "--http-host", "127.0.0.1", "--read-side", "--read-secret-file", readSecret]),
        ]
        let ingestURL = "http://127.0.0.1:\(try await workers[3].httpPort())"

        // What the Play Billing Library gave the app, as the app hands it to its backend.
        let signed = try licensing.sign(packageName: package, productId: product, purchaseToken: token, orderId: orderId)
        let purchaseData = try file("purchase.json", signed.purchaseData), signature = try file("purchase.sig", signed.signature)
        let script = TestServices.packageRoot.appendingPathComponent("Tests/IAPCtlTests/googleplay_producer.py").path
        let user = "android-py-user"
        let run = try await offPool { try runCommand(python, [script, servers, prefix, ingestURL, readSecret, user, purchaseData, signature]) }
        let logs = { workers.map { $0.log.suffix(10).joined(separator: "\n") }.joined(separator: "\n") }
        #expect(run.status == 0, "\(run.output)\nworkers:\n\(logs())")
        let answer = run.output.split(separator: "\n").last.flatMap { JSONValue.parse(Array($0.utf8))?.objectValue }
        let granted = try #require(answer?["granted"]?.objectValue, "the producer prints the grant it saw: \(run.output)")
        let holdings = try #require(answer?["holdings"]?.objectValue, "and the holdings it read: \(run.output)")
        #expect(granted["transactionId"]?.stringValue == orderId && granted["alreadyGranted"] == .bool(false), "\(granted)")
        #expect(granted["items"]?.arrayValue?.first?.objectValue?["balance"]?.int64Value == coins, "\(granted)")
        #expect(holdings["userId"]?.stringValue == user)
        #expect(holdings["balances"]?.objectValue?["coins"]?.int64Value == coins, "the read side answers the catalog's coins: \(holdings)")

        // The finisher consumes it at Google once, after the grant, and announces it finished.
        try? await waitUntil("the purchase is consumed at the stand-in") { api.consumeCount(PurchaseToken(token)) >= 1 }
        #expect(api.consumeCount(PurchaseToken(token)) >= 1, "finisher log:\n\(workers[2].log.suffix(20).joined(separator: "\n"))\nrequests: \(api.requests)")
        let tailFinished = ["tail", "--topic", prefix + "iap.transaction.finished", "--from-beginning", "--max", "1", "--timeout", "60", "--brokers", servers]
        let finished = try await VerifyCommandTests.run(tailFinished, input: "").lines
            .compactMap { JSONValue.parse(Array($0.utf8))?.objectValue?["value"]?.objectValue }
        #expect(finished.map { "\($0["transactionId"]?.stringValue ?? "") \($0["method"]?.stringValue ?? "") \($0["userId"]?.stringValue ?? "")" }
                == ["\(orderId) googlePlayAPI \(user)"], "finisher log:\n\(workers[2].log.suffix(20).joined(separator: "\n"))")
        #expect(api.consumeCount(PurchaseToken(token)) == 1 && api.acknowledgeCount(PurchaseToken(token)) == 0, "a consumable is consumed, once")
        #expect(api.requests.contains("GET \(GooglePlayAPIStandIn.apiPrefix)\(package)/purchases/products/\(product)/tokens/\(token)"),
                "the verifier asked Google: \(api.requests)")
        for worker in workers { #expect(try await worker.terminate() == 0) }
    }
}

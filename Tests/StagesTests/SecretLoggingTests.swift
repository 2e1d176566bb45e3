import Crypto
import Foundation
import InMemoryPurchaseStore
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import Synchronization
import Testing
import WorkerRuntime

/// Google Play's pushes and a signed submission through the verifier (the Android Publisher API played by the stand-in,
/// over real HTTP) and the granter, their logs captured at debug and at info: no purchase token, account id, signature or
/// purchase data appears in any line, and each token the lines speak of appears as its fingerprint.
@Suite struct SecretLoggingTests {
    static let package: PackageName = "com.example.coins"

    /// A token as long and as random as Google Play's.
    static func token() -> String {
        let letters = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
        return String((0..<160).map { _ in letters.randomElement()! })
    }

    /// The lines a logger at `minimum` writes.
    final class Lines: Sendable {
        let lines = Mutex<[String]>([])
        var all: [String] { lines.withLock { $0 } }
    }

    struct Secrets {
        /// A purchase with its order id, bound to an account id.
        let ordered = SecretLoggingTests.token()
        /// A promotional purchase: no order id, so that its token is its transaction id.
        let promotional = SecretLoggingTests.token()
        /// A token Google does not know.
        let unknown = SecretLoggingTests.token()
        /// Submitted by the app, signed.
        let submitted = SecretLoggingTests.token()
        let account = "acct-" + SecretLoggingTests.token().prefix(40)
        var tokens: [String] { [ordered, promotional, unknown, submitted] }
    }

    /// Runs the pushes and the submission through the verifier, and what it verified through the granter, both logging at
    /// `minimum`: the lines, and the secrets besides the tokens (signature, purchase data).
    func run(_ secrets: Secrets, minimum: Logger.Level) async throws -> (lines: [String], signed: [String]) {
        let purchase = { (order: TransactionID?, account: String?) in
            GooglePlayAPIStandIn.Purchase(packageName: Self.package, productId: "coins.100", orderId: order, obfuscatedExternalAccountId: account)
        }
        let api = try GooglePlayAPIStandIn(purchases: [
            PurchaseToken(secrets.ordered): purchase("GPA.3301-2211-0042-55100", secrets.account),
            PurchaseToken(secrets.promotional): purchase(nil, nil),
            PurchaseToken(secrets.submitted): purchase("GPA.3301-2211-0042-55101", secrets.account),
        ])
        let signer = try GooglePlaySigner()
        let key = try PublicKey(subjectPublicKeyInfo: Data(try signer.publicKeyBase64().utf8))
        let keyFile = try #require(FileManager.default.contents(atPath: try api.writeServiceAccountKeyFile()))
        let client = AndroidPublisherClient(configuration: .init(baseURL: api.baseURL), serviceAccount: try GoogleServiceAccount(keyFile: keyFile))

        let lines = Lines()
        let context = StageContext(codec: StageFixtures.codec, logger: Logger(stage: "t", minimum: minimum, sink: { line in lines.lines.withLock { $0.append(line) } }))
        let store = InMemoryPurchaseStore()
        let verifier = VerifierStage(context: context, store: store,
                                     stores: StoreVerifiers(googlePlay: GooglePlayVerifier(configuration: .init(apps: [Self.package: key]), api: client)))
        let granter = GranterStage(context: context, store: store, catalog: StageFixtures.catalog, clawBackDueRefunds: false)

        func push(_ token: String) -> StoreNotificationReceived {
            let text = GooglePlayPushSigner.notification(package: Self.package.rawValue, "oneTimeProductNotification",
                                                         ["version": .string("1.0"), "notificationType": .integer(1),
                                                          "purchaseToken": .string(token), "sku": .string("coins.100")])
            return StoreNotificationReceived(developerNotification: text, purchaseToken: PurchaseToken(token), receivedAt: Date())
        }
        let signed = try signer.sign(packageName: Self.package.rawValue, productId: "coins.100", purchaseToken: secrets.submitted,
                                     orderId: "GPA.3301-2211-0042-55101", obfuscatedAccountId: secrets.account)
        let submission = PurchaseSubmitted(store: .googleplay, kind: .googlePlayPurchase,
                                           googleplay: .init(packageName: Self.package, productId: "coins.100", purchaseToken: PurchaseToken(secrets.submitted),
                                                             purchaseData: signed.purchaseData, signature: signed.signature),
                                           userId: "android-1", submittedAt: Date(), source: .client)
        var verified: [PurchaseVerifiedEvent] = []
        let messages = try [push(secrets.ordered), push(secrets.promotional), push(secrets.unknown)].map { try StageFixtures.message($0) }
            + [try StageFixtures.message(submission)]
        for (offset, message) in messages.enumerated() {
            let answer = try await verifier.handle(KafkaMessage(topic: message.topic, partition: 0, offset: Int64(offset), key: message.key,
                                                                value: message.value, headers: message.headers))
            verified += StageFixtures.published(answer, as: PurchaseVerifiedEvent.self)
        }
        // The pushes' purchases have no owner yet (kept unclaimed); the submission's is verified, and granted.
        #expect(verified.map(\.transactionId) == ["GPA.3301-2211-0042-55101"], "\(verified.map(\.transactionId))")
        #expect(try await store.purchase(PurchaseKey(store: .googleplay, transactionId: TransactionID(secrets.promotional)))?.state == .unclaimed,
                "the promotional purchase is recorded by its token")
        for event in verified { _ = try await granter.handle(try StageFixtures.message(event)) }
        #expect(try await store.balances(of: "android-1") == ["coins": 100])
        return (lines.all, [signed.signature, signed.purchaseData])
    }

    @Test(arguments: [Logger.Level.debug, .info])
    func noTokenSignatureOrPurchaseDataIsLoggedOnlyTheTokensFingerprints(_ level: Logger.Level) async throws {
        let secrets = Secrets()
        let (lines, signed) = try await run(secrets, minimum: level)
        #expect(!lines.isEmpty)
        for secret in secrets.tokens + [secrets.account] + signed {
            let leaking = lines.filter { $0.contains(secret) }
            #expect(leaking.isEmpty, "\(secret.prefix(16))… logged at \(level): \(leaking)")
        }
        // The lines still say which purchase they are about: the push's, and (as its transaction id) the promotional one's.
        for token in [secrets.ordered, secrets.promotional, secrets.unknown] {
            let fingerprint = Fingerprint(token).description
            #expect(fingerprint.utf8.count == 19 && fingerprint.hasPrefix("sha256:"))
            #expect(lines.contains { $0.contains(fingerprint) }, "no line names \(fingerprint) at \(level): \(lines)")
        }
        if level == .debug {
            #expect(lines.contains { $0.contains("GPA.3301-2211-0042-55101") }, "an order id is no secret: logged as it is")
        }
    }

    /// A purchase recorded by its token (no order id) that the granter cannot find fails with an error that is logged: it
    /// names the token by its fingerprint.
    @Test func anErrorAboutAPurchaseRecordedByItsTokenNamesItsFingerprint() async throws {
        let token = Self.token()
        let granter = GranterStage(context: StageContext(codec: StageFixtures.codec, logger: Logger(stage: "t", minimum: .error)), store: InMemoryPurchaseStore(),
                                   catalog: StageFixtures.catalog, clawBackDueRefunds: false)
        let verified = PurchaseVerifiedEvent(store: .googleplay, transactionId: TransactionID(token), productId: "coins.100", productType: "consumable", quantity: 1,
                                             userId: "android-1", purchaseDate: Date(), source: .client, verifiedAt: Date())
        do {
            let result = try await granter.handle(try StageFixtures.message(verified))
            Issue.record("a purchase the store does not hold was answered: \(result)")
        } catch {
            #expect(error is TransientError)
            #expect(!"\(error)".contains(token) && "\(error)".contains("googleplay:" + Fingerprint(token).description), "\(error)")
        }
    }

    /// Whatever a call site passes under a name that says it holds a secret, the line has its fingerprint.
    @Test func fieldsNamedForSecretsAreFingerprintedWhateverTheyHold() throws {
        let lines = Lines()
        let logger = Logger(stage: "t", minimum: .debug, sink: { line in lines.lines.withLock { $0.append(line) } })
        let secret = Self.token()
        logger.debug("d", ["purchaseToken": secret, "appAccountToken": PurchaseToken(secret), "signature": secret, "Authorization": "Bearer " + secret,
                           "signedPayload": secret, "receipt": secret, "transactionId": secret, "productId": "coins.100", "empty": ""])
        let line = try #require(lines.all.first)
        #expect(!line.contains(secret))
        let fields = try #require(JSONValue.parse(Array(line.utf8))?.objectValue)
        for name in ["purchaseToken", "appAccountToken", "signature", "signedPayload", "receipt", "transactionId"] {
            #expect(fields[name]?.stringValue == Fingerprint(secret).description, "\(name)")
        }
        #expect(fields["Authorization"]?.stringValue == Fingerprint("Bearer " + secret).description)
        #expect(fields["productId"]?.stringValue == "coins.100", "other fields as they are")
        logger.info("i", ["transactionId": "2000000123456789", "originalTransactionId": "GPA.3301-2211-0042-55100..3"])
        let ids = try #require(lines.all.last.flatMap { JSONValue.parse(Array($0.utf8))?.objectValue })
        #expect(ids["transactionId"]?.stringValue == "2000000123456789" && ids["originalTransactionId"]?.stringValue == "GPA.3301-2211-0042-55100..3",
                "store ids are logged as they are")
    }
}

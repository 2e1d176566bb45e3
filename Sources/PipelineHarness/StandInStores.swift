import Crypto
import Foundation
import JSONSchema
import Kafka
import PurchaseDomain
import StoreFixtures

/// The App Store Server API the finisher calls in `bench` and `chaos`: the shared stand-in, with the developer key
/// the workers sign their tokens with.
public struct StandInAppStore: Sendable {
    /// The bundle id of the harness's signed purchases and of its workers' settings.
    public static let bundleId = "com.example.coins"
    public static let keyId = "STANDIN001"
    public let key: PrivateKey
    public let issuerId = UUID().uuidString.lowercased()
    public let api: AppStoreServerAPIStandIn

    public init() throws {
        key = try PrivateKey.generateP256()
        api = try AppStoreServerAPIStandIn(publicKey: try key.publicKey(), keyId: Self.keyId, issuerId: issuerId, bundleId: Self.bundleId,
                                           configuration: .init(maxConnections: 512))
    }
}

extension StandInAppStore {
    /// Makes App Store `purchases` known to the stand-in API as the store keeps them (*Get Transaction Info*, the history
    /// of the customer: their user).
    public func record(_ purchases: [PurchaseInput.Purchase]) {
        for purchase in purchases.of(.appstore) {
            api.recordTransaction(purchase.jws, transactionId: purchase.transactionId, originalTransactionId: purchase.originalTransactionId,
                                  customer: purchase.user.rawValue)
        }
    }
}

/// The AppCoins store of `bench` and `chaos`: the shared stand-in API, and the app key its purchases are signed with
/// (the workers are given its public half, as from the store's back office).
public struct StandInAppCoins: Sendable {
    public static let packageName = StandInAppStore.bundleId
    public let signer: AppCoinsSigner
    public let api: AppCoinsAPIStandIn

    public init() throws {
        self.init(signer: try AppCoinsSigner(), api: try AppCoinsAPIStandIn(purchases: [:], configuration: .init(maxConnections: 512)))
    }

    public init(signer: AppCoinsSigner, api: AppCoinsAPIStandIn) {
        self.signer = signer
        self.api = api
    }
}

/// Google Play as the harness plays it: the app's licensing key, the Android Publisher API with its token endpoint, in
/// the harness's process, and the push of its real-time developer notifications to the ingest.
public struct StandInGooglePlay: Sendable {
    public static let packageName = StandInAppStore.bundleId
    public let signer: GooglePlaySigner
    public let api: GooglePlayAPIStandIn
    public let push: GooglePlayPush

    public init() throws {
        try self.init(signer: try GooglePlaySigner(), api: try GooglePlayAPIStandIn(purchases: [:], configuration: .init(maxConnections: 512)))
    }

    /// - Parameter push: a new signing key of Google's unless given.
    public init(signer: GooglePlaySigner, api: GooglePlayAPIStandIn, push: GooglePlayPush? = nil) throws {
        self.signer = signer
        self.api = api
        self.push = try push ?? GooglePlayPush()
    }

    /// The order id and purchase token of the harness's purchase `id`.
    public static func names(of id: String) -> (order: TransactionID, token: PurchaseToken) {
        (TransactionID("GPA.\(id)"), PurchaseToken("googleplay-token-\(id)"))
    }

    /// The purchase token of the harness's order `order` (`names(of:)`).
    public static func token(ofOrder order: TransactionID) -> PurchaseToken { PurchaseToken("googleplay-token-\(order.rawValue.dropFirst(4))") }

    /// The plan's Google Play purchases not completed exactly once at the stand-in (a consumable consumed, an entitlement
    /// acknowledged, nothing else), and those of `untouched` (never granted) consumed or acknowledged at all: what the
    /// chaos run's books add for the store.
    public func completionViolations(_ purchases: [PurchaseInput.Purchase], untouched: [PurchaseInput.Purchase] = []) -> [String] {
        purchases.compactMap { completionViolation($0) } + untouched.compactMap { completionViolation($0, untouched: true) }
    }

    /// How Google Play `purchase` was not completed at the stand-in as it should have been (exactly once; not at all when
    /// `untouched`); nil when it was, or it is of another store.
    public func completionViolation(_ purchase: PurchaseInput.Purchase, untouched: Bool = false) -> String? {
        guard case .googleplay = purchase.store else { return nil }
        let token = Self.token(ofOrder: purchase.transactionId)
        let (consumed, acknowledged) = (api.consumeCount(token), api.acknowledgeCount(token))
        let expected = untouched ? (0, 0) : purchase.product.entitlement == nil ? (1, 0) : (0, 1)
        return (consumed, acknowledged) == expected ? nil
            : "Google Play \(purchase.transactionId): consumed \(consumed), acknowledged \(acknowledged) times, expected \(expected.0), \(expected.1)"
    }
}

extension WorkerProcesses {
    /// The workers as `bench` and `chaos` run them: trusting `pki`'s root, granting from `catalog` (JSON text),
    /// finishing App Store purchases through `appStore`, selling on AppCoins through `appCoins` and on Google Play through
    /// `googlePlay` when given (the ingest then takes its pushes), their HTTP
    /// endpoints on free loopback ports, logging at info.
    public static func withStandInStores(directory: URL, kafka: KafkaConfiguration, storeURL: String, prefix: String, pki: TestPKI,
                                    schemas: JSONSchemaRegistry, catalog: String, appStore: StandInAppStore, appCoins: StandInAppCoins? = nil,
                                    googlePlay: StandInGooglePlay? = nil, environment extra: [String: String] = [:]) throws -> WorkerProcesses {
        var stores = extra
        if let googlePlay {
            let appKey = directory.appendingPathComponent("googleplay-key.txt"), account = directory.appendingPathComponent("service-account.json")
            try Data(try googlePlay.signer.publicKeyBase64().utf8).write(to: appKey)
            try Data(try googlePlay.api.serviceAccountKeyJSON().utf8).write(to: account)
            stores["IAP_GOOGLEPLAY_APPS"] = "\(StandInGooglePlay.packageName)=\(appKey.path)"
            stores["IAP_GOOGLEPLAY_SERVICE_ACCOUNT_FILE"] = account.path
            stores["IAP_GOOGLEPLAY_API_URL"] = googlePlay.api.baseURL.absoluteString
            stores.merge(try googlePlay.push.environment(in: directory)) { _, push in push }
        }
        if let appCoins {
            let appKey = directory.appendingPathComponent("appcoins-key.txt")
            try Data(try appCoins.signer.publicKeyBase64().utf8).write(to: appKey)
            stores["IAP_APPCOINS_URL"] = appCoins.api.baseURL.absoluteString
            stores["IAP_APPCOINS_APPS"] = "\(StandInAppCoins.packageName)=\(appKey.path)"
        }
        let keyFile = directory.appendingPathComponent("api-key.p8")
        try Data(try appStore.key.pemRepresentation().utf8).write(to: keyFile)
        let root = directory.appendingPathComponent("root.pem")
        try Data(pki.root.pemRepresentation.utf8).write(to: root)
        let catalogFile = directory.appendingPathComponent("catalog.json")
        try Data(catalog.utf8).write(to: catalogFile)
        return try WorkerProcesses(directory: directory, environment: [
            "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrapServers ?? "", "IAP_STORE_URL": storeURL, "IAP_TOPIC_PREFIX": prefix, "IAP_GROUP_PREFIX": prefix,
            "IAP_BUNDLE_ID": StandInAppStore.bundleId, "IAP_ENVIRONMENT": "Sandbox", "IAP_ROOT_CERTIFICATES": root.path, "IAP_CATALOG": catalogFile.path,
            "IAP_LOG_LEVEL": "info", "IAP_SCHEMAS_DIR": schemas.directory ?? "", "IAP_HTTP_PORT": "0", "IAP_HTTP_HOST": "127.0.0.1",
            "IAP_APPSTORE_API_URL": appStore.api.baseURL.absoluteString, "IAP_APPSTORE_KEY_ID": StandInAppStore.keyId,
            "IAP_APPSTORE_ISSUER_ID": appStore.issuerId, "IAP_APPSTORE_PRIVATE_KEY_FILE": keyFile.path,
        ].merging(stores) { _, new in new })
    }

    /// Reads each of `names`' HTTP port from its port file and waits until all answer `/readyz` and `also` returns nil
    /// (else what it still waits for). Returns the ports.
    public func waitUntilReady(_ names: [String], say: (String) -> Void, also: () -> String?) async throws -> [String: Int] {
        var ports: [String: Int] = [:]
        for name in names { ports[name] = try await port(of: name) }
        try await waitFor(say, "workers ready", timeout: 120) {
            for (name, port) in ports where await localHTTPGet(port: port, path: "/readyz").status != 200 { return "\(name) not ready" }
            return also()
        }
        return ports
    }
}

import Crypto
import Foundation
import JSONSchema
import Kafka
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
        for purchase in purchases where purchase.store == .appstore {
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

extension WorkerProcesses {
    /// The workers as `bench` and `chaos` run them: trusting `pki`'s root, granting from `catalog` (JSON text),
    /// finishing App Store purchases through `appStore`, selling on AppCoins through `appCoins` when given, their HTTP
    /// endpoints on free loopback ports, logging at info.
    public static func withStandInStores(directory: URL, kafka: KafkaConfiguration, storeURL: String, prefix: String, pki: TestPKI,
                                    schemas: JSONSchemaRegistry, catalog: String, appStore: StandInAppStore, appCoins: StandInAppCoins? = nil,
                                    environment extra: [String: String] = [:]) throws -> WorkerProcesses {
        var stores = extra
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

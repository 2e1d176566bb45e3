import Crypto
import Foundation
import InMemoryPurchaseStore
import Kafka
import PurchaseDomain
import PurchaseEvents
import Stages
import StageTestSupport
import StoreFixtures
import StoreVerification
import WorkerRuntime

/// A sweeper on the in-memory repository that asks a stand-in App Store Server API (over real HTTP, signed data of
/// `pki`'s chain trusted), its events sent to librdkafka's mock cluster.
struct SweeperAppStoreFixture {
    let store = InMemoryPurchaseStore()
    let cluster: KafkaMockCluster
    let pki: TestPKI
    let key: PrivateKey
    let api: AppStoreServerAPIStandIn

    init(name: String) throws {
        cluster = try KafkaMockCluster(brokers: 1)
        for type in [EventType.refundDue, .purchaseRevoked, .purchaseSubmitted, .purchaseVerified, .subscriptionStatus] {
            try cluster.createTopic(StageFixtures.codec.topic(type), partitions: 1)
        }
        pki = try Self.pki(name)
        key = try PrivateKey.generateP256()
        api = try AppStoreServerAPIStandIn(publicKey: try key.publicKey(), keyId: "KEY1", issuerId: "issuer", bundleId: StageFixtures.bundleID.rawValue)
    }

    /// A chain valid from before the tests' fixed dates (2025) until a year from now, whenever the tests run: signed data
    /// is checked against the chain at its signing date.
    static func pki(_ name: String) throws -> TestPKI {
        try TestPKI.make(.init(validFrom: Date(timeIntervalSince1970: 1_700_000_000), validUntil: Date().addingTimeInterval(365 * 86_400)), name: name)
    }

    /// The sweeper at `now`, `batchSize` purchases a page.
    func sweeper(now: Date, batchSize: Int = 500) throws -> SweeperService<ContinuousClock> {
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": cluster.bootstrapServers])))
        let client = AppStoreServerAPIClient(configuration: .init(baseURL: api.baseURL, keyId: "KEY1", issuerId: "issuer", bundleId: StageFixtures.bundleID,
                                                                  privateKey: key))
        let verifier = try SignedDataVerifier(configuration: .init(trustedRoots: [pki.root], bundleId: StageFixtures.bundleID, environment: .sandbox))
        return SweeperService(configuration: .init(deadlines: [.appstore: 86_400], batchSize: batchSize), store: store, producer: producer,
                              context: StageContext(codec: StageFixtures.codec, logger: Logger(stage: "sweeper", minimum: .error), now: { now }),
                              clock: ContinuousClock(), appStore: [.sandbox: AppStoreLookup(api: client, verifier: verifier)])
    }
}

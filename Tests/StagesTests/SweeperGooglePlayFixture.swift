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

/// A sweeper on the in-memory repository that asks a stand-in Android Publisher API (over real HTTP), its events sent
/// to librdkafka's mock cluster.
struct SweeperGooglePlayFixture {
    static let package: PackageName = "com.example.coins"
    let store = InMemoryPurchaseStore()
    let cluster: KafkaMockCluster
    let api: GooglePlayAPIStandIn

    init() throws {
        cluster = try KafkaMockCluster(brokers: 1)
        for type in [EventType.refundDue, .storeNotification, .subscriptionStatus] {
            try cluster.createTopic(StageFixtures.codec.topic(type), partitions: 1)
        }
        api = try GooglePlayAPIStandIn(purchases: [:])
    }

    /// The sweeper at `now`, Google Play's deadline three days; `refunds`: claw-back on (due orders refunded).
    func sweeper(now: Date, refunds: Bool = false) throws -> SweeperService<ContinuousClock> {
        let producer = try KafkaProducer(configuration: .init(kafka: KafkaConfiguration(["bootstrap.servers": cluster.bootstrapServers])))
        let client = AndroidPublisherClient(configuration: .init(baseURL: api.baseURL),
                                            serviceAccount: try GoogleServiceAccount(keyFile: Data(try api.serviceAccountKeyJSON().utf8)))
        return SweeperService(configuration: .init(deadlines: [.googleplay: 259_200], refundsGooglePlay: refunds), store: store, producer: producer,
                              context: StageContext(codec: StageFixtures.codec, logger: Logger(stage: "sweeper", minimum: .error), now: { now }),
                              clock: ContinuousClock(), appStores: PerApp(single: [:]), googlePlay: GooglePlayVerifier(configuration: .init(apps: [:]), api: client))
    }
}

import Foundation
import Kafka
import PurchaseEvents
import StoreFixtures
import StoreVerification

/// The harness's one input generator: App Store coin purchases signed by a test PKI, submitted as a client would,
/// with repeats, forgeries, malformed messages and purchases left unconsumed past their deadline as the plan asks;
/// and what the pipeline must make of each (`PipelineBooks`). The demo, the benchmark and the chaos run differ in
/// their plan, not in how their input is made or counted.
public struct PurchaseInput: Sendable {
    public struct Plan: Sendable {
        /// Distinct valid purchases.
        public var unique: Int
        /// Repeats of valid purchases among them (a retry, a producer duplicate): each answered "already granted".
        public var duplicates = 0
        /// Purchases signed by a key outside the trusted chain: each rejected, none granted.
        public var forged = 0
        /// Messages that are not a submission (truncated JSON, a schema violation, invalid UTF-8): each dead-lettered.
        public var malformed = 0
        /// The last `stale` valid purchases were bought 48 hours ago, and the plan never consumes them: each flagged
        /// refund-due once by the sweeper.
        public var stale = 0
        /// Users the purchases go to: purchase i to user i mod `users`, or at random.
        public var users: Int
        public var randomUsers = false
        /// Users are named `userPrefix` + a number from 1.
        public var userPrefix = "user-"
        /// The first transaction id; the valid purchases' ids follow it, the forgeries' start 10^12 after it.
        public var firstTransactionId: Int64
        /// Whether the submissions are shuffled (repeats may come before their original) or in purchase order.
        public var shuffled = true
        /// Whether each transaction carries an `appAccountToken`, as apps that set one send it.
        public var appAccountTokens = false
        /// What is bought: purchase i buys `products[i % products.count]` (consumable coin packs of the workers' catalog).
        public var products: [Product] = [Product(id: "coins.500", coins: 500), Product(id: "coins.100", coins: 100), Product(id: "coins.100", coins: 100)]

        public init(unique: Int, users: Int, firstTransactionId: Int64) {
            self.unique = unique
            self.users = users
            self.firstTransactionId = firstTransactionId
        }
    }

    /// A consumable coin pack, as the workers' catalog prices it.
    public struct Product: Sendable {
        public let id: String
        public let coins: Int64
        public init(id: String, coins: Int64) {
            self.id = id
            self.coins = coins
        }
    }

    public struct Purchase: Sendable {
        public let transactionId: String
        public let user: String
        public let productId: String
        public let coins: Int64
        /// The signed transaction (JWS).
        public let jws: String
        public let stale: Bool
    }

    /// The catalog the purchases are priced in, as the workers read it (`IAP_CATALOG`).
    public static let catalog = #"{"products":{"coins.100":{"type":"consumable","currency":"coins","amount":100},"coins.500":{"type":"consumable","currency":"coins","amount":500}}}"#

    public let plan: Plan
    /// Each valid purchase once, in purchase order.
    public let unique: [Purchase]
    /// The forgeries by submission id, with the transaction id they claim.
    public let forged: [String: String]
    /// Keys of the malformed messages.
    public let malformed: Set<String>
    /// Every submission of the plan, in the plan's order.
    public let messages: [KafkaProducerMessage]

    /// Makes `plan`'s input, signed by `pki`, encoded by `codec`, purchased `now` (the stale ones 48 hours before).
    public static func make(_ plan: Plan, pki: TestPKI, codec: EventCodec, now: Date) throws -> PurchaseInput {
        let signer = JWSSigner(pki: pki)
        var generator = SystemRandomNumberGenerator()
        var unique: [Purchase] = []
        var messages: [KafkaProducerMessage] = []
        for index in 0..<plan.unique {
            let id = String(plan.firstTransactionId + Int64(index))
            let product = plan.products[index % plan.products.count]
            let user = plan.userPrefix + String(plan.randomUsers ? Int.random(in: 1...plan.users, using: &generator) : index % plan.users + 1)
            let stale = index >= plan.unique - plan.stale
            let jws = try signer.sign(AppStorePayloads.transaction(
                transactionId: id, productId: product.id, bundleId: StandInAppStore.bundleId, environment: .sandbox,
                purchaseDate: stale ? now.addingTimeInterval(-48 * 3600) : now, signedDate: now,
                appAccountToken: plan.appAccountTokens ? UUID().uuidString.lowercased() : nil))
            let purchase = Purchase(transactionId: id, user: user, productId: product.id, coins: product.coins, jws: jws, stale: stale)
            unique.append(purchase)
            messages.append(try codec.message(submission(purchase, source: .client, at: now), time: now))
        }
        // A repeat is the same signed transaction from the same user: a retry, a restore, a producer duplicate.
        let valid = messages
        for _ in 0..<plan.duplicates { messages.append(valid.randomElement(using: &generator)!) }
        var forged: [String: String] = [:]
        let forger = plan.forged > 0 ? JWSSigner(pki: try TestPKI.make(name: "forger")) : signer
        for index in 0..<plan.forged {
            let id = String(plan.firstTransactionId + 1_000_000_000_000 + Int64(index))
            let jws = try forger.sign(AppStorePayloads.transaction(transactionId: id, productId: plan.products[0].id, bundleId: StandInAppStore.bundleId,
                                                                  environment: .sandbox, purchaseDate: now, signedDate: now))
            let forgery = PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws, userId: plan.userPrefix + String(index % plan.users + 1),
                                            submittedAt: now, source: .client, submissionId: UUID().uuidString.lowercased())
            forged[forgery.submissionId ?? ""] = id
            messages.append(try codec.message(forgery, time: now))
        }
        var malformed = Set<String>()
        let bodies = [Data(#"{"store": "appstore", "kind": "signedTransaction", truncated"#.utf8),
                      Data(#"{"store": "appstore", "kind": "signedTransaction", "userId": 42}"#.utf8),
                      Data([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d])]
        for index in 0..<plan.malformed {
            let key = "malformed-\(plan.firstTransactionId)-\(index)"
            malformed.insert(key)
            // The headers of a real submission, so that the message reaches the verifier's decoding.
            messages.append(KafkaProducerMessage(topic: codec.topic(.purchaseSubmitted), key: Data(key.utf8), value: bodies[index % bodies.count],
                                                 headers: valid.first?.headers ?? []))
        }
        if plan.shuffled { messages.shuffle(using: &generator) }
        return PurchaseInput(plan: plan, unique: unique, forged: forged, malformed: malformed, messages: messages)
    }

    /// `purchase` submitted again by its user from `source` (a restore, a retry), under a submission id of its own.
    public static func submission(_ purchase: Purchase, source: SubmissionSource, at now: Date) -> PurchaseSubmitted {
        PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: purchase.jws, userId: purchase.user,
                          submittedAt: now, source: source, submissionId: UUID().uuidString.lowercased())
    }

    /// Messages that end in a distinct outcome: valid purchases, forgeries, malformed messages.
    public var outcomesExpected: Int { unique.count + forged.count + malformed.count }
}

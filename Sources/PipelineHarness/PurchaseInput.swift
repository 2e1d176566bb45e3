import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import StoreFixtures
import StoreVerification
import WorkerRuntime

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
        /// Valid App Store submissions carrying the test-only fault header (`StageRunner.faultHeader`, holding `trapMark`):
        /// each traps a verifier started with `IAP_TEST_FAULT_MARK` set to it, until it is dead-lettered `crashedWorker`.
        /// Their transaction ids start 1.5 × 10^12 after the first.
        public var trapping = 0
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
        /// Whether each transaction carries its buyer's `appAccountToken` (one per user, as apps that set one send it).
        public var appAccountTokens = false
        /// Subscriptions, each three periods of one original transaction for one user (`subscriptionPeriods`): a silver month
        /// that ended 10 days ago, its renewal, and an upgrade to gold 5 days ago that ends the renewal then. Their
        /// transaction ids follow the valid purchases'.
        public var subscriptions = 0
        /// What is bought: purchase i buys `products[i % products.count]`. AppCoins products need `make`'s `appCoins`.
        public var products: [Product] = [Product(id: "coins.500", coins: 500), Product(id: "coins.100", coins: 100), Product(id: "coins.100", coins: 100)]

        public init(unique: Int, users: Int, firstTransactionId: Int64) {
            self.unique = unique
            self.users = users
            self.firstTransactionId = firstTransactionId
        }
    }

    /// A product of the workers' catalog (`catalog`), in the store that sells it.
    public struct Product: Sendable {
        public enum Kind: Sendable, Equatable {
            /// A consumable that adds to a currency balance.
            case coins(Int64)
            /// A non-consumable: an entitlement for good, finished at its grant and never flagged.
            case entitlement(ItemCode)
            /// An auto-renewable subscription's tier: an entitlement until each period's expiry, finished at its grant.
            case subscription(ItemCode)
        }

        public let id: ProductID
        public let store: Store
        public let kind: Kind

        public init(id: ProductID, store: Store = .appstore, kind: Kind) {
            self.id = id
            self.store = store
            self.kind = kind
        }

        /// An App Store coin pack.
        public init(id: ProductID, coins: Int64) { self.init(id: id, kind: .coins(coins)) }

        public var coins: Int64 { if case .coins(let amount) = kind { amount } else { 0 } }
        /// What it gives other than coins, for good or (a subscription) for a period.
        public var entitlement: ItemCode? {
            switch kind {
            case .entitlement(let name), .subscription(let name): name
            case .coins: nil
            }
        }
        public var isSubscription: Bool { if case .subscription = kind { true } else { false } }
    }

    public struct Purchase: Sendable {
        public let store: Store
        /// The store's transaction id (AppCoins: its order id).
        public let transactionId: TransactionID
        public let user: UserID
        public let product: Product
        /// The App Store signed transaction (JWS); empty for AppCoins and Google Play.
        public let jws: String
        public let stale: Bool
        /// The subscription a period belongs to (its first transaction's id); the transaction's own id otherwise.
        public var originalTransactionId: TransactionID
        /// A subscription period's start and end (`purchaseDate`, `expiresDate`).
        public var period: ClosedRange<Date>?

        init(store: Store, transactionId: TransactionID, user: UserID, product: Product, jws: String, stale: Bool,
             originalTransactionId: TransactionID? = nil, period: ClosedRange<Date>? = nil) {
            (self.store, self.transactionId, self.user, self.product, self.jws, self.stale) = (store, transactionId, user, product, jws, stale)
            self.originalTransactionId = originalTransactionId ?? transactionId
            self.period = period
        }

        public var productId: ProductID { product.id }
        /// Whether the sweeper flags it refund-due: an App Store consumable left unconsumed past its deadline (an entitlement
        /// is finished at its grant, never flagged; the plan's AppCoins purchases are consumed by the app, its Google Play
        /// ones by the finisher, at their grant).
        public var isFlaggedAtDeadline: Bool {
            guard stale, product.entitlement == nil else { return false }
            switch store {
            case .appstore, .stripe: return true // finished when the app reports it consumed, which it never does for a stale one
            case .appcoins, .googleplay: return false // the store reported it consumed, or the finisher consumed it, at its grant
            }
        }
        public var coins: Int64 { product.coins }
        public var key: PurchaseKey { PurchaseKey(store: store, transactionId: transactionId) }
    }

    /// The catalog the purchases are priced in, as the workers read it (`IAP_CATALOG`).
    public static let catalog = #"""
        {"appstore":{"coins.100":{"type":"consumable","currency":"coins","amount":100},"coins.500":{"type":"consumable","currency":"coins","amount":500},
        "adfree":{"type":"nonConsumable","entitlement":"adfree"},
        "pass.silver":{"type":"autoRenewable","entitlement":"silver"},"pass.gold":{"type":"autoRenewable","entitlement":"gold"}},
        "appcoins":{"coins.100":{"type":"consumable","currency":"coins","amount":100}},
        "googleplay":{"coins.100":{"type":"consumable","currency":"coins","amount":100},"adfree":{"type":"nonConsumable","entitlement":"adfree"}}}
        """#

    /// The catalog of `catalog` and, with `web`, Stripe prices of coins and ad-free (`webProducts`).
    public static func catalog(web: Bool) -> String {
        guard web else { return catalog }
        return String(catalog.dropLast(1)) + #","stripe":{"price_coins100":{"type":"consumable","currency":"coins","amount":100},"price_adfree":{"type":"nonConsumable","entitlement":"adfree"}}}"#
    }

    /// Web purchases through Stripe (`catalog(web: true)`): coins and ad-free.
    public static let webProducts = [Product(id: "price_coins100", store: .stripe, kind: .coins(100)), Product(id: "price_adfree", store: .stripe, kind: .entitlement("adfree"))]

    /// Every store and product type the catalog sells: App Store coin packs and an ad-free entitlement, AppCoins coins,
    /// Google Play coins and ad-free.
    public static let mixedProducts = [Product(id: "coins.500", coins: 500), Product(id: "coins.100", coins: 100),
                                       Product(id: "adfree", kind: .entitlement("adfree")), Product(id: "coins.100", store: .appcoins, kind: .coins(100)),
                                       Product(id: "coins.100", store: .googleplay, kind: .coins(100)),
                                       Product(id: "adfree", store: .googleplay, kind: .entitlement("adfree"))]

    /// The tiers of the plan's subscriptions: the catalog's two auto-renewable products of one subscription group.
    public static let silver = Product(id: "pass.silver", kind: .subscription("silver"))
    public static let gold = Product(id: "pass.gold", kind: .subscription("gold"))

    /// One subscription's periods, relative to `now` (whole days): silver from 40 days ago to 10 days ago, renewed
    /// until 20 days ahead, and upgraded to gold 5 days ago until 25 days ahead. The upgrade ends the renewal at its start;
    /// the first period had ended by itself.
    public static func subscriptionPeriods(now: Date) -> [(product: Product, period: ClosedRange<Date>)] {
        func day(_ days: Double) -> Date { now.addingTimeInterval(days * 86_400) }
        return [(silver, day(-40)...day(-10)), (silver, day(-10)...day(20)), (gold, day(-5)...day(25))]
    }

    public let plan: Plan
    /// Each valid purchase once, in purchase order.
    public let unique: [Purchase]
    /// The forgeries by submission id, with the transaction id they claim.
    public let forged: [String: TransactionID]
    /// Keys of the malformed messages.
    public let malformed: Set<String>
    /// The trapping submissions by key, with the transaction id they carry (`Plan.trapping`).
    public let trapping: [String: TransactionID]
    /// What the trapping submissions' fault header holds: the verifier's `IAP_TEST_FAULT_MARK`.
    public static let trapMark = "harness-trap"
    /// Each user's account token, when the plan's transactions carry them (`Plan.appAccountTokens`).
    public let accountTokens: [UserID: String]
    /// Every submission of the plan, in the plan's order.
    public let messages: [KafkaProducerMessage]
    /// The app's reports that it delivered (consumed) the plan's web coins that are not stale: sent beside the submissions,
    /// each may overtake its grant.
    public let consumptionReports: [KafkaProducerMessage]

    /// Makes `plan`'s input, signed by `pki`, encoded by `codec`, purchased `now` (the stale ones 48 hours before); AppCoins
    /// purchases are signed by `appCoins`' app key and made known to its API (paid, and consumed by the app: they finish
    /// at their grant); Stripe ones are paid Checkout Sessions of `stripe`, submitted by the app's backend.
    public static func make(_ plan: Plan, pki: TestPKI, codec: EventCodec, now: Date, appCoins: StandInAppCoins? = nil,
                            googlePlay: StandInGooglePlay? = nil, stripe: StandInStripe? = nil) throws -> PurchaseInput {
        let signer = JWSSigner(pki: pki)
        var generator = SystemRandomNumberGenerator()
        var unique: [Purchase] = []
        var messages: [KafkaProducerMessage] = []
        var reports: [KafkaProducerMessage] = []
        var accountTokens: [UserID: String] = [:]
        func accountToken(of user: UserID) -> String? {
            guard plan.appAccountTokens else { return nil }
            if let token = accountTokens[user] { return token }
            let token = UUID().uuidString.lowercased()
            accountTokens[user] = token
            return token
        }
        /// Whom the `index`th purchase (or subscription) goes to.
        func buyer(_ index: Int) -> UserID {
            UserID(plan.userPrefix + String(plan.randomUsers ? Int.random(in: 1...plan.users, using: &generator) : index % plan.users + 1))
        }
        for index in 0..<plan.unique {
            let id = String(plan.firstTransactionId + Int64(index))
            let product = plan.products[index % plan.products.count]
            let user = buyer(index)
            let stale = index >= plan.unique - plan.stale
            let purchased = stale ? now.addingTimeInterval(-48 * 3600) : now
            switch product.store {
            case .appstore:
                let jws = try signer.sign(AppStorePayloads.transaction(
                    transactionId: id, productId: product.id.rawValue, bundleId: StandInAppStore.bundleId, environment: .sandbox,
                    type: product.entitlement == nil ? .consumable : .nonConsumable, purchaseDate: purchased, signedDate: now,
                    appAccountToken: accountToken(of: user)))
                let purchase = Purchase(store: .appstore, transactionId: TransactionID(id), user: user, product: product, jws: jws, stale: stale)
                unique.append(purchase)
                messages.append(try codec.message(submission(purchase, source: .client, at: now), time: now))
            case .appcoins:
                guard let appCoins else { throw HarnessError("the plan sells \(product.id) on AppCoins: make needs the stand-in AppCoins store") }
                let (order, token) = ("appcoins.order.\(id)", "appcoins-token-\(id)")
                appCoins.api.set(PurchaseToken(token), .init(packageName: PackageName(StandInAppCoins.packageName), sku: product.id, orderId: TransactionID(order), consumptionState: 1,
                                              purchaseTime: purchased))
                let signed = try appCoins.signer.sign(packageName: StandInAppCoins.packageName, sku: product.id.rawValue, purchaseToken: token, orderId: order,
                                                      purchaseTime: purchased)
                unique.append(Purchase(store: .appcoins, transactionId: TransactionID(order), user: user, product: product, jws: "", stale: stale))
                messages.append(try codec.message(PurchaseSubmitted(
                    store: .appcoins, kind: .appcoinsPurchase,
                    appcoins: .init(packageName: PackageName(StandInAppCoins.packageName), sku: product.id, purchaseToken: PurchaseToken(token), purchaseData: signed.purchaseData,
                                    signature: signed.signature),
                    userId: user, submittedAt: now, source: .client, submissionId: UUID().uuidString.lowercased()), time: now))
            case .googleplay:
                guard let googlePlay else { throw HarnessError("the plan sells \(product.id) on Google Play: make needs the stand-in Google Play store") }
                let (order, token) = StandInGooglePlay.names(of: id)
                googlePlay.api.set(token, .init(packageName: PackageName(StandInGooglePlay.packageName), productId: product.id, orderId: order, purchaseTime: purchased))
                let signed = try googlePlay.signer.sign(packageName: StandInGooglePlay.packageName, productId: product.id.rawValue, purchaseToken: token.rawValue,
                                                        orderId: order.rawValue, purchaseTime: purchased)
                unique.append(Purchase(store: .googleplay, transactionId: order, user: user, product: product, jws: "", stale: stale))
                messages.append(try codec.message(PurchaseSubmitted(
                    store: .googleplay, kind: .googlePlayPurchase,
                    googleplay: .init(packageName: PackageName(StandInGooglePlay.packageName), productId: product.id, purchaseToken: token,
                                      purchaseData: signed.purchaseData, signature: signed.signature),
                    userId: user, submittedAt: now, source: .client, submissionId: UUID().uuidString.lowercased()), time: now))
            case .stripe:
                guard let stripe else { throw HarnessError("the plan sells \(product.id) on Stripe: make needs the stand-in Stripe") }
                stripe.sell(id, price: product.id, to: user, at: purchased)
                let purchase = Purchase(store: .stripe, transactionId: StandInStripe.transactionId(of: id), user: user, product: product, jws: "", stale: stale)
                unique.append(purchase)
                messages.append(try codec.message(PurchaseSubmitted(
                    store: .stripe, kind: .stripeCheckout, stripe: .init(checkoutSessionId: StandInStripe.names(of: id).session),
                    userId: user, submittedAt: now, source: .server, submissionId: UUID().uuidString.lowercased()), time: now))
                // The app reports the coins it delivered consumed (the stale ones never); a report may overtake its grant.
                if !stale && product.entitlement == nil {
                    reports.append(try codec.message(PurchaseConsumed(store: .stripe, transactionId: purchase.transactionId, userId: user, consumedAt: now), time: now))
                }
            }
        }
        for index in 0..<plan.subscriptions {
            let user = buyer(index)
            let periods = subscriptionPeriods(now: now)
            let first = plan.firstTransactionId + Int64(plan.unique + periods.count * index)
            for (offset, (product, period)) in periods.enumerated() {
                let id = String(first + Int64(offset))
                let jws = try signer.sign(AppStorePayloads.transaction(
                    transactionId: id, originalTransactionId: String(first), productId: product.id.rawValue, bundleId: StandInAppStore.bundleId,
                    environment: .sandbox, type: .autoRenewable, purchaseDate: period.lowerBound, signedDate: now,
                    extra: ["expiresDate": .integer(AppStorePayloads.milliseconds(period.upperBound))]))
                let purchase = Purchase(store: .appstore, transactionId: TransactionID(id), user: user, product: product, jws: jws, stale: false,
                                        originalTransactionId: TransactionID(String(first)), period: period)
                unique.append(purchase)
                messages.append(try codec.message(submission(purchase, source: .client, at: now), time: now))
            }
        }
        // A repeat is the same signed transaction from the same user: a retry, a restore, a producer duplicate.
        let valid = messages
        for _ in 0..<plan.duplicates { messages.append(valid.randomElement(using: &generator)!) }
        var forged: [String: TransactionID] = [:]
        let forger = plan.forged > 0 ? JWSSigner(pki: try TestPKI.make(name: "forger")) : signer
        let forgedProduct = Dictionary(grouping: plan.products, by: \.store)[.appstore]?.first?.id.rawValue ?? "coins.100"
        for index in 0..<plan.forged {
            let id = String(plan.firstTransactionId + 1_000_000_000_000 + Int64(index))
            let jws = try forger.sign(AppStorePayloads.transaction(transactionId: id, productId: forgedProduct, bundleId: StandInAppStore.bundleId,
                                                                  environment: .sandbox, purchaseDate: now, signedDate: now))
            let forgery = PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws, userId: UserID(plan.userPrefix + String(index % plan.users + 1)),
                                            submittedAt: now, source: .client, submissionId: UUID().uuidString.lowercased())
            forged[forgery.submissionId ?? ""] = TransactionID(id)
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
        var trapping: [String: TransactionID] = [:]
        for index in 0..<plan.trapping {
            let id = String(plan.firstTransactionId + 1_500_000_000_000 + Int64(index))
            let key = "trapping-\(plan.firstTransactionId)-\(index)"
            trapping[key] = TransactionID(id)
            let jws = try signer.sign(AppStorePayloads.transaction(transactionId: id, productId: "coins.100", bundleId: StandInAppStore.bundleId,
                                                                  environment: .sandbox, purchaseDate: now, signedDate: now))
            var message = try codec.message(PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: jws,
                                                              userId: UserID(plan.userPrefix + String(index % plan.users + 1)), submittedAt: now,
                                                              source: .client, submissionId: UUID().uuidString.lowercased()), time: now)
            message.key = Data(key.utf8)
            message.headers.append(KafkaHeader(key: StageRunner.faultHeader, string: trapMark))
            messages.append(message)
        }
        if plan.shuffled { messages.shuffle(using: &generator) }
        return PurchaseInput(plan: plan, unique: unique, forged: forged, malformed: malformed, trapping: trapping, accountTokens: accountTokens,
                             messages: messages, consumptionReports: reports)
    }

    /// App Store `purchase` submitted again by its user from `source` (a restore, a retry), under a submission id of its own.
    public static func submission(_ purchase: Purchase, source: SubmissionSource, at now: Date) -> PurchaseSubmitted {
        PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: purchase.jws, userId: purchase.user,
                          submittedAt: now, source: source, submissionId: UUID().uuidString.lowercased())
    }

    /// A notification of the App Store about `purchase` (`REFUND`, `REFUND_REVERSED`, a subscription period's `EXPIRED` or
    /// `DID_RENEW`, …), as the App Store sends one: its signed transaction again (for a refund with `revocationDate`, `date`,
    /// and `revocationReason`), in a notification signed at `date` by `pki`, the chain the purchase was signed by.
    public static func notification(_ type: AppStoreNotificationType, subtype: String? = nil, of purchase: Purchase, pki: TestPKI,
                                    at date: Date) throws -> StoreNotificationReceived {
        let signer = JWSSigner(pki: pki)
        let transaction = try type == .refund ? refundedTransaction(of: purchase, pki: pki, at: date) : signer.sign(try transactionPayload(of: purchase))
        let payload = AppStorePayloads.notification(type: type, subtype: subtype, bundleId: StandInAppStore.bundleId, appAppleId: nil, environment: .sandbox,
                                                    signedTransactionInfo: transaction, signedDate: date)
        return StoreNotificationReceived(signedPayload: try signer.sign(payload), receivedAt: date)
    }

    /// App Store `purchase`'s transaction as the store signs it once refunded at `date` (`revocationDate`, `revocationReason`).
    public static func refundedTransaction(of purchase: Purchase, pki: TestPKI, at date: Date) throws -> String {
        var transaction = try transactionPayload(of: purchase)
        transaction["revocationDate"] = .integer(AppStorePayloads.milliseconds(date))
        transaction["revocationReason"] = .integer(0)
        return try JWSSigner(pki: pki).sign(transaction)
    }

    /// The payload of App Store `purchase`'s signed transaction.
    private static func transactionPayload(of purchase: Purchase) throws -> [String: JSONValue] {
        let parts = purchase.jws.split(separator: ".")
        guard case .appstore = purchase.store, parts.count == 3, let bytes = Base64URL.decode(parts[1]), let transaction = JSONValue.parse(Array(bytes))?.objectValue else {
            throw HarnessError("\(purchase.transactionId): not an App Store purchase with a signed transaction")
        }
        return transaction
    }

    /// The plan's subscriptions: each one's periods (`subscriptionPeriods`), in the order they begin.
    public var subscriptions: [[Purchase]] {
        Dictionary(grouping: unique.filter(\.product.isSubscription)) { "\($0.store.rawValue):\($0.originalTransactionId)" }.values
            .map { $0.sorted { ($0.period?.lowerBound ?? .distantPast) < ($1.period?.lowerBound ?? .distantPast) } }
    }

    /// The plan's valid purchases of `store`, in purchase order.
    public func purchases(of store: Store) -> [Purchase] { unique.of(store) }

    /// Messages that end in a distinct outcome: valid purchases, forgeries, malformed and trapping messages.
    public var outcomesExpected: Int { unique.count + forged.count + malformed.count + trapping.count }
}

extension Array where Element == PurchaseInput.Purchase {
    /// Those of `store`, in their order (the scenarios that only one store has: App Store refunds, Google Play pushes).
    public func of(_ store: Store) -> [PurchaseInput.Purchase] { Dictionary(grouping: self, by: \.store)[store] ?? [] }
}

import Foundation
import JSON
import Kafka
import PurchaseDomain
import PurchaseEvents
import StageTestSupport
import StoreFixtures
import StoreVerification
import TestData

/// Hostile messages for each input topic of the stages, drawn from a seeded generator: events built from values at and
/// beyond the producer contract's bounds (mostly of a few users, transactions and adjustments, so that repeats, confusable
/// twins and events out of order meet), and now and then their bytes or headers broken. A message the App Store signs
/// (a submission's transaction, a notification) is signed with the run's own test PKI.
struct HostileEvents {
    static let t0 = Date(timeIntervalSince1970: 1_765_000_000)
    let codec = StageFixtures.codec
    let signer: JWSSigner
    var rng: SeededGenerator

    init(seed: UInt64, pki: TestPKI) {
        rng = SeededGenerator(seed: seed)
        signer = JWSSigner(pki: pki)
    }

    /// The topics the stages consume from outside the pipeline or from each other, each drawn as often as the others.
    static let topics: [EventType] = [.purchaseSubmitted, .storeNotification, .userToken, .purchaseVerified, .purchaseRevoked, .refundDue, .userAdjustment,
                                      .itemGranted, .purchaseConsumed, .userConsent, .consumptionRequested]

    // Small pools, so that inputs meet: twins that only look alike, repeats, a revocation before its purchase.
    static let users: [String] = ["Kevin", "\u{212A}evin", "caf\u{E9}", "cafe\u{301}", "user", "\u{FF55}ser", "user\u{200D}", "p\u{430}ypal"]
    static let transactions: [String] = ["1000", "1001", "\u{661}\u{660}\u{660}\u{660}", "1000\u{200B}", "2000", "2001"]
    static let products: [String] = ["coins.100", "coins.1000", "adfree", "pass.monthly", "pass.season", "coins.100\u{200D}", "c\u{43E}ins.100"]
    static let currencies: [String] = ["coins", "c\u{43E}ins", "caf\u{E9}", "cafe\u{301}", "\u{FB01}", "fi"]
    static let adjustments: [String] = ["adj-1", "adj-2", "adj-\u{661}", "adj-1\u{200D}"]

    mutating func pick(_ pool: [String], hostileOneIn odds: Int = 8, limit: Int = 256) -> String {
        Int.random(in: 0..<odds, using: &rng) == 0 ? HostileValues.string(limit: limit, using: &rng) : pool.randomElement(using: &rng) ?? ""
    }

    /// Every user an input named, for the read-back checks.
    var namedUsers: Set<UserID> = []

    mutating func user() -> UserID {
        let user = UserID(pick(Self.users))
        namedUsers.insert(user)
        return user
    }

    mutating func chance(_ oneIn: Int) -> Bool { Int.random(in: 0..<oneIn, using: &rng) == 0 }

    /// A time near the run's, or an extreme one (the epoch, before it, the year 9999, past it).
    mutating func date(around now: Date) -> Date {
        guard chance(10) else { return now.addingTimeInterval(Double(Int.random(in: -90...90, using: &rng)) * 86_400) }
        return [Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: -86_400), Date(timeIntervalSince1970: 253_402_300_799),
                Date(timeIntervalSince1970: 253_402_300_800), Date(timeIntervalSince1970: 1e15), now].randomElement(using: &rng) ?? now
    }

    mutating func integer(_ bounds: ClosedRange<Int64>, usualIn usual: ClosedRange<Int64>) -> Int64 {
        chance(4) ? HostileValues.integer(bounds: bounds, using: &rng) : Int64.random(in: usual, using: &rng)
    }

    mutating func store() -> Store { chance(6) ? [.googleplay, .appcoins].randomElement(using: &rng) ?? .appstore : .appstore }

    /// A hostile message of `topic` at `now`: the event as a producer would send it, or (one in four) its bytes or headers broken.
    mutating func message(_ topic: EventType, at now: Date) throws -> KafkaMessage {
        let produced: KafkaProducerMessage
        switch topic {
        case .purchaseSubmitted: produced = try codec.message(try submission(at: now), time: now)
        case .storeNotification: produced = try codec.message(try notification(at: now), time: now)
        case .userToken:
            let token = chance(3) ? HostileValues.string(limit: 36, using: &rng) : UUID(uuid: (0, 0, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, UInt8.random(in: 0...3, using: &rng))).uuidString
            produced = try codec.message(UserAccountTokenRegistered(userId: user(), appAccountToken: AccountToken(chance(2) ? token.lowercased() : token),
                                                                    registeredAt: date(around: now)), time: now)
        case .purchaseVerified: produced = try codec.message(verified(at: now), time: now)
        case .purchaseRevoked:
            produced = try codec.message(PurchaseRevokedEvent(
                store: store(), transactionId: TransactionID(pick(Self.transactions)), userId: chance(2) ? user() : nil,
                productId: chance(2) ? ProductID(pick(Self.products)) : nil, reason: PurchaseRevokedEvent.Reason.allCases.randomElement(using: &rng) ?? .REFUND,
                refundShare: chance(3) ? integer(.min ... .max, usualIn: 0...1000) : nil, notificationUUID: chance(2) ? pick(Self.adjustments) : nil,
                decidedAt: chance(2) ? date(around: now) : nil, revokedAt: date(around: now)), time: now)
        case .refundDue:
            produced = try codec.message(RefundDue(store: store(), transactionId: TransactionID(pick(Self.transactions)), userId: chance(4) ? nil : user(),
                                                   productId: ProductID(pick(Self.products)), state: chance(2) ? "verified" : pick(["granted", "revoked"]),
                                                   purchaseDate: date(around: now), deadline: date(around: now), flaggedAt: now), time: now)
        case .userAdjustment: produced = try codec.message(adjustment(at: now), time: now)
        case .itemGranted:
            let items = (0..<Int.random(in: 0...2, using: &rng)).map { _ in
                GrantedItem(kind: chance(2) ? .currency : .entitlement, code: ItemCode(pick(Self.currencies)), amount: integer(.min ... .max, usualIn: 1...1000))
            }
            produced = try codec.message(ItemGranted(store: store(), transactionId: TransactionID(pick(Self.transactions)), userId: user(),
                                                     productId: ProductID(pick(Self.products)), quantity: Int(integer(.min ... .max, usualIn: 1...3)), items: items,
                                                     alreadyGranted: chance(2), grantedAt: date(around: now)), time: now)
        case .purchaseConsumed:
            produced = try codec.message(PurchaseConsumed(store: store(), transactionId: TransactionID(pick(Self.transactions)), userId: user(),
                                                          consumedAt: date(around: now)), time: now)
        case .userConsent:
            produced = try codec.message(UserConsent(userId: user(), consumptionData: chance(2), decidedAt: date(around: now)), time: now)
        default: // .consumptionRequested
            produced = try codec.message(ConsumptionRequested(
                store: store(), transactionId: TransactionID(pick(Self.transactions)), userId: chance(2) ? user() : nil,
                productId: chance(2) ? ProductID(pick(Self.products)) : nil, requestReason: chance(2) ? "UNINTENDED_PURCHASE" : nil,
                notificationUUID: pick(Self.adjustments), requestedAt: date(around: now), answerBy: date(around: now)), time: now)
        }
        return broken(produced)
    }

    /// `produced` as a consumer hands it over, now and then with its value or headers broken.
    mutating func broken(_ produced: KafkaProducerMessage) -> KafkaMessage {
        var value = produced.value
        var headers = produced.headers
        var key = produced.key
        if chance(4) {
            switch Int.random(in: 0..<6, using: &rng) {
            case 0, 1, 2: value = value.map { Data(HostileValues.brokenJSON(Array($0), using: &rng)) }
            case 3: value = chance(2) ? nil : Data()
            case 4: headers.removeAll { $0.key == ["ce_type", "ce_id", "ce_specversion"].randomElement(using: &rng) }
            default:
                key = chance(2) ? nil : Data(HostileValues.string(limit: 256, using: &rng).utf8)
                headers = headers.map { header in
                    guard header.key == "ce_type", chance(2) else { return header }
                    return KafkaHeader(key: header.key, value: Data(HostileValues.string(limit: 64, using: &rng).utf8))
                }
            }
        }
        return KafkaMessage(topic: produced.topic, partition: 0, offset: 0, key: key, value: value, headers: headers)
    }

    mutating func verified(at now: Date) -> PurchaseVerifiedEvent {
        let product = pick(Self.products)
        return PurchaseVerifiedEvent(
            store: store(), transactionId: TransactionID(pick(Self.transactions)), originalTransactionId: chance(2) ? TransactionID(pick(Self.transactions)) : nil,
            productId: ProductID(product), productType: chance(2) ? nil : pick(["consumable", "nonConsumable", "autoRenewable", "nonRenewing"]),
            quantity: Int(integer(.min ... .max, usualIn: 1...3)), userId: user(), purchaseDate: date(around: now),
            expiresDate: chance(2) ? date(around: now) : nil, revocationDate: chance(8) ? date(around: now) : nil,
            price: chance(2) ? integer(.min ... .max, usualIn: 0...10_000) : nil, source: .client, verifiedAt: now)
    }

    mutating func adjustment(at now: Date) -> UserAdjustment {
        let limit = CurrencyAmounts.itemLimit
        let items = (0..<Int.random(in: 0...3, using: &rng)).map { _ in
            chance(4) ? UserAdjustment.Item(kind: .entitlement, code: ItemCode(pick(["adfree", "pass"] + Self.currencies)), expiresAt: chance(2) ? date(around: now) : nil)
                : UserAdjustment.Item(kind: .currency, code: ItemCode(pick(Self.currencies)), amount: chance(8) ? nil : integer(-limit ... limit, usualIn: -200...500))
        }
        return UserAdjustment(adjustmentId: AdjustmentID(pick(Self.adjustments)), userId: user(), requestedBy: pick(["support"], hostileOneIn: 4),
                              reason: pick(["goodwill"], hostileOneIn: 3, limit: 1024), items: chance(6) ? nil : items,
                              reverses: chance(5) ? AdjustmentID(pick(Self.adjustments)) : nil, requestedAt: date(around: now))
    }

    /// A transaction payload as the App Store signs it, with hostile ids, quantity, token and dates.
    mutating func transaction(at now: Date) -> [String: JSONValue] {
        let product = pick(Self.products)
        let type: AppStoreProductType = product.hasPrefix("pass.monthly") ? .autoRenewable : product.hasPrefix("pass") ? .nonRenewing
            : product.hasPrefix("adfree") ? .nonConsumable : .consumable
        let id = pick(Self.transactions)
        return AppStorePayloads.transaction(
            transactionId: id, originalTransactionId: chance(3) ? pick(Self.transactions) : id, productId: product, bundleId: chance(12) ? pick([StageFixtures.bundle + "\u{200D}"]) : StageFixtures.bundle,
            type: type, quantity: Int(integer(.min ... .max, usualIn: 1...3)), purchaseDate: date(around: now), signedDate: date(around: now),
            appAccountToken: chance(3) ? HostileValues.string(limit: 36, using: &rng) : nil, price: chance(2) ? integer(.min ... .max, usualIn: 0...10_000) : 990,
            revocationDate: chance(10) ? date(around: now) : nil,
            extra: type == .autoRenewable ? ["expiresDate": .integer(AppStorePayloads.milliseconds(date(around: now)))] : [:])
    }

    mutating func submission(at now: Date) throws -> PurchaseSubmitted {
        let user = user()
        if chance(8) {
            return PurchaseSubmitted(store: .appstore, kind: .appReceipt, receipt: HostileValues.string(limit: 4096, using: &rng), userId: user, submittedAt: now, source: .client)
        }
        let signed = chance(10) ? HostileValues.string(limit: 65_536, using: &rng) : try signer.sign(transaction(at: now))
        return PurchaseSubmitted(store: .appstore, kind: .signedTransaction, signedTransaction: signed, userId: user, submittedAt: date(around: now),
                                 source: chance(4) ? .restore : .client, submissionId: chance(4) ? pick(Self.adjustments) : nil,
                                 appAccountToken: chance(4) ? AccountToken(HostileValues.string(limit: 36, using: &rng)) : nil)
    }

    mutating func notification(at now: Date) throws -> StoreNotificationReceived {
        let types: [AppStoreNotificationType] = [.refund, .revoke, .refundReversed, .refundDeclined, .consumptionRequest, .oneTimeCharge, .didRenew, .expired,
                                                 .gracePeriodExpired, .renewalExtended, .test, AppStoreNotificationType(rawValue: pick(["SUBSCRIBED"]))]
        let info = chance(10) ? HostileValues.string(limit: 1024, using: &rng) : try signer.sign(transaction(at: now))
        let payload = AppStorePayloads.notification(type: types.randomElement(using: &rng) ?? .refund, uuid: pick(Self.adjustments, hostileOneIn: 4, limit: 64),
                                                    bundleId: StageFixtures.bundle, appAppleId: nil, signedTransactionInfo: chance(12) ? nil : info,
                                                    signedDate: date(around: now))
        return StoreNotificationReceived(signedPayload: chance(12) ? HostileValues.string(limit: 65_536, using: &rng) : try signer.sign(payload), receivedAt: now)
    }
}

import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

/// `iap-verifier`: `purchase.submitted` → store verification → the purchase recorded with its product type →
/// `purchase.verified` or `purchase.rejected` (`revoked` when its refund came first); `store.notification` →
/// verified notification → `purchase.revoked` for REFUND, REVOKE, REFUND_REVERSED, EXPIRED and
/// GRACE_PERIOD_EXPIRED, the transaction of a renewal or one-time charge recorded for its owner like a submission,
/// other types logged; and of any of them that carries a renewal info, the subscription's status recorded and, when it
/// changed, `subscription.status`.
public struct VerifierStage: StoreBackedStage {
    public let name = "verifier"
    public let topics: [String]
    let context: StageContext
    let store: any SubscriptionStatusRepository
    public var repository: any PurchaseRepository { store }
    /// The stores the apps sell in, keyed by store; what names another is refused.
    let stores: StoreVerifiers
    /// What in a message's bytes names a store verified through its API (`StoreVerifiers.apiMarkers`).
    private let apiMarkers: [Data]
    /// The deployment's apps: which app a purchase was bought in (recorded and announced with it), and its catalog, which
    /// names the product type where the store does not (receipts, AppCoins, Google Play).
    let apps: AppDirectory?
    /// What a restore under another user id does to an entitlement.
    let restorePolicy: RestorePolicy
    /// Whether a transaction bound to an account token (StoreKit's `appAccountToken`, an AppCoins UUID payload) is refused
    /// from a submission that names none (`appAccountTokenMissing`), as from one that names another: for apps whose
    /// backends always name the user's token, so that a leaked signed transaction cannot be submitted under another user
    /// by leaving the token out. Off: a submission naming none binds nothing (apps without tokens).
    let requireAccountToken: Bool
    /// When a purchase whose payment is pending at the store is first asked about again (then less and less often).
    let pendingRecheck: Duration

    public init(context: StageContext, store: any SubscriptionStatusRepository, stores: StoreVerifiers, apps: AppDirectory? = nil,
                restorePolicy: RestorePolicy = .transfer, requireAccountToken: Bool = false, pendingRecheck: Duration = .seconds(60)) {
        self.stores = stores
        self.apiMarkers = stores.apiMarkers
        self.pendingRecheck = pendingRecheck
        self.apps = apps
        self.restorePolicy = restorePolicy
        self.requireAccountToken = requireAccountToken
        self.context = context
        self.store = store
        self.topics = [context.codec.topic(.purchaseSubmitted), context.codec.topic(.storeNotification), context.codec.topic(.userToken)]
    }

    public func handle(_ message: KafkaMessage) async throws -> StageResult {
        switch context.codec.eventType(ofTopic: message.topic) {
        case .storeNotification?:
            switch context.codec.decode(message, as: StoreNotificationReceived.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let notification): return try await handle(notification)
            }
        case .userToken?:
            switch context.codec.decode(message, as: UserAccountTokenRegistered.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let registration): return try await register(registration)
            }
        default: break
        }
        switch context.codec.decode(message, as: PurchaseSubmitted.self) {
        case .failure(let invalid): return context.deadLetter(invalid)
        case .success(let submission): return try await handle(submission)
        }
    }

    /// One store transaction for the batch (see `handleInOneTransaction`). Its submissions are verified before it
    /// begins (their purchases then read ahead in one statement), so that it holds the store for the records alone: the
    /// App Store's locally, AppCoins' and Google Play's with their store's API, all of those calls at once. A submission
    /// whose store could not answer now ends the batch (handled alone after it, retried as always), as does any other
    /// message whose bytes name a store asked through its API (a Google Play notification reads the purchase again; a
    /// false match only costs it its batch).
    public func handle(batch messages: [KafkaMessage]) async -> [Result<StageResult, any Error>] {
        let namesAnAPIStore = { (message: KafkaMessage) in
            guard let value = message.value else { return false }
            return apiMarkers.contains { value.range(of: $0) != nil }
        }
        var submissions: [Int64: PurchaseSubmitted] = [:] // by offset (one partition's messages)
        for message in messages {
            guard context.codec.eventType(ofTopic: message.topic) == .purchaseSubmitted,
                  case .success(let submission) = context.codec.decode(message, as: PurchaseSubmitted.self) else {
                if namesAnAPIStore(message) { break } else { continue }
            }
            submissions[message.offset] = submission
        }
        var verified: [Int64: (PurchaseSubmitted, Result<[VerifiedPurchase], Rejection>)] = [:]
        // The stores' APIs at once (each call waits on the network), then the App Store's signatures (CPU), in order.
        await withTaskGroup(of: (Int64, PurchaseSubmitted, Result<[VerifiedPurchase], Rejection>).self) { group in
            for (offset, submission) in submissions where isAskedOfTheStore(submission) {
                group.addTask { (offset, submission, await verify(submission)) }
            }
            for await (offset, submission, verdict) in group { verified[offset] = (submission, verdict) }
        }
        for (offset, submission) in submissions.sorted(by: { $0.key < $1.key }) where !isAskedOfTheStore(submission) {
            verified[offset] = (submission, await verify(submission))
        }
        let batchable = { (message: KafkaMessage) in
            guard let (_, verdict) = verified[message.offset] else { return !namesAnAPIStore(message) }
            if case .failure(let rejection) = verdict, rejection.isRetryable, rejection.reason != .purchasePending { return false }
            return true
        }
        let keys = messages.prefix(while: batchable).flatMap { message -> [PurchaseKey] in
            guard case .success(let purchases)? = verified[message.offset]?.1 else { return [] }
            return purchases.map { PurchaseKey(store: $0.store, transactionId: $0.transactionId) }
        }
        return await handleInOneTransaction(messages, batchable: batchable, readingAhead: keys) { message in
            guard let (submission, verdict) = verified[message.offset] else { return try await handle(message) }
            return try await handle(submission, verified: verdict)
        }
    }

    /// Whether `submission` is verified by asking its store's API (the network), not locally.
    func isAskedOfTheStore(_ submission: PurchaseSubmitted) -> Bool { stores.verifier(of: submission.store)?.asksTheStoresAPI ?? false }

    /// - Parameter verified: what `verify` answered for it, if it was asked already.
    private func handle(_ submission: PurchaseSubmitted, verified: Result<[VerifiedPurchase], Rejection>? = nil) async throws -> StageResult {
        let verified = if let verified { verified } else { await verify(submission) }
        switch verified {
        case .success(let purchases): return .publish(try await record(purchases, for: submission))
        case .failure(let rejection) where rejection.reason == .purchasePending:
            // Not a verdict on the purchase, and not one to wait for on this partition: answered now (`retryable:
            // true`, the app may submit it again once the payment settles) and asked about again later.
            let answer = self.rejection(submission, rejection, reason: rejection.reason.rawValue, transactionId: nil, productId: nil)
            return .recheck(publish: try await answers([answer]), after: pendingRecheck)
        case .failure(let rejection) where rejection.isRetryable:
            throw TransientError("\(rejection)") // The store could not answer now; nothing was decided.
        case .failure(let rejection):
            return .publish(try await answers([self.rejection(submission, rejection, reason: rejection.reason.rawValue, transactionId: nil, productId: nil)]))
        }
    }

    /// A Google Play subscription bought in place of another (an upgrade, a downgrade, a re-signup) names the old one's
    /// token: it continues that subscription (its original, when recorded), so that its period ends the old one's as an
    /// App Store upgrade does. Any other purchase as it is.
    func continuingItsSubscription(_ purchase: VerifiedPurchase) async throws -> VerifiedPurchase {
        guard let linked = purchase.replacedPurchaseToken else { return purchase }
        var continued = purchase
        continued.originalTransactionId = try await store.originalTransactionId(store: purchase.store, purchaseToken: linked) ?? TransactionID(linked)
        return continued
    }

    /// What the store says the product is, else what its app's catalog says, else `unknown`.
    func productType(of purchase: VerifiedPurchase, for submission: PurchaseSubmitted) -> ProductType {
        purchase.productType.flatMap(ProductType.init(appStoreType:))
            ?? app(of: purchase, for: submission)?.catalog?.product(purchase.store, purchase.productId)?.type ?? .unknown
    }

    /// The deployment's app a purchase was bought in: by the bundle id its App Store data names, or the package of its
    /// Android purchase data (the store's verifier accepted either only for a configured app).
    func app(of purchase: VerifiedPurchase, for submission: PurchaseSubmitted) -> AppDirectory.App? {
        guard let apps else { return nil }
        let name = switch purchase.store {
        case .appstore: purchase.raw["bundleId"]?.stringValue
        case .appcoins: submission.appcoins?.packageName.rawValue
        case .googleplay: submission.googleplay?.packageName.rawValue
        case .stripe: purchase.productId.rawValue // an app's Stripe prices are its own
        }
        return name.flatMap { apps.app(store: purchase.store, storeName: $0) }
    }

    /// The app a purchase records and announces (none in a deployment that names no apps).
    func recordedApp(of purchase: VerifiedPurchase, for submission: PurchaseSubmitted) -> AppID? {
        app(of: purchase, for: submission).flatMap { apps?.recordedID(of: $0) }
    }

    /// Records each verified purchase of a submission and answers with its event (the messages to publish).
    /// - Parameter byTheStore: the submission is the store's own charge (a notification), for the subscription's owner: it
    ///   names no account token, and needs none.
    func record(_ purchases: [VerifiedPurchase], for submission: PurchaseSubmitted, byTheStore: Bool = false) async throws -> [KafkaProducerMessage] {
        var events: [KafkaProducerMessage] = []
        for purchase in purchases {
            let purchase = try await continuingItsSubscription(purchase)
            if !byTheStore, let mismatch = accountTokenMismatch(purchase.appAccountToken, purchase.transactionId, purchase.productId, submission) {
                // Bound to another account: a leaked signed transaction cannot move between accounts that use tokens.
                events += try await answers([mismatch])
                continue
            }
            // Built before anything is recorded: a purchase whose ids the pipeline cannot carry is rejected, not
            // recorded as verified and then dead-lettered downstream with nobody granting it.
            let type = productType(of: purchase, for: submission)
            guard let verifiedMessage = conformingMessage(PurchaseVerifiedEvent(
                store: purchase.store, transactionId: purchase.transactionId,
                originalTransactionId: purchase.originalTransactionId, productId: purchase.productId, productType: type.rawValue,
                quantity: purchase.quantity, userId: submission.userId, purchaseDate: purchase.purchaseDate, expiresDate: purchase.expiresDate,
                revocationDate: purchase.revocationDate, environment: purchase.environment, appAccountToken: purchase.appAccountToken,
                price: purchase.price, currency: purchase.currency, consumed: purchase.consumed, source: submission.source,
                verifiedAt: context.now(), app: recordedApp(of: purchase, for: submission)))
            else {
                events += try await answers([rejection(submission, Rejection(.malformedPayload, "the store's ids do not fit the event schema (length, control characters)"),
                                                       reason: RejectionReason.malformedPayload.rawValue, transactionId: nil, productId: nil)])
                continue
            }
            let record = purchaseRecord(purchase, type: type, for: submission)
            // A restore (StoreKit 1, receipts) has a transaction id of its own beside the original's. Under an original
            // another user holds, the restore policy judges it as it judges a replay of the original itself. An Android
            // one-time purchase's original is its token, which no other order shares: the order itself is the key
            // (`existing` below), so it is not looked up, a statement per purchase saved.
            if purchase.mayContinueAnothersOriginal(type: type), let original = purchase.originalTransactionId, original != purchase.transactionId,
               let owner = try await store.owner(store: purchase.store, originalTransactionId: original), owner != submission.userId {
                let restored = try await restoreOriginal(original, of: record, from: owner, submission: submission)
                events += try await answers(restored.answers)
                if restored.refused { continue }
            }
            switch try await store.recordVerified(record, at: context.now()) {
            case .existing(_, let owner) where owner != submission.userId:
                // Bound to another account when it was recorded (a receipt names none): not moved.
                if let held = try await store.purchase(record.key), let mismatch = accountTokenMismatch(held, submission) {
                    events += try await answers([mismatch])
                } else if let answer = try await restore(record, submission: submission) {
                    events += try await answers([answer])
                } else {
                    events.append(verifiedMessage)
                }
            case .revokedEarlier:
                // Its refund or revocation arrived first: recorded, never granted.
                events += try await answers([rejection(submission, Rejection(.storeRejected, "the store refunded or revoked this transaction before it was submitted"),
                                                       reason: RefusalReason.revoked.rawValue, transactionId: purchase.transactionId, productId: purchase.productId)])
            case .recorded, .existing:
                events.append(verifiedMessage)
            }
            if !byTheStore { events += try await announceSubscriptionStatus(of: purchase) } // a notification's says which it was
        }
        return events
    }

    /// The record of a purchase `submission` proves, of product type `type`.
    func purchaseRecord(_ purchase: VerifiedPurchase, type: ProductType, for submission: PurchaseSubmitted) -> PurchaseRecord {
        PurchaseRecord(key: PurchaseKey(store: purchase.store, transactionId: purchase.transactionId),
                       userId: submission.userId, productId: purchase.productId, productType: type, quantity: purchase.quantity,
                       // Never later than now: a client's `submittedAt` in the future would keep the purchase from its deadline.
                       purchaseTime: purchase.purchaseDate ?? min(submission.submittedAt, context.now()), environment: purchase.environment,
                       originalTransactionId: purchase.originalTransactionId,
                       packageName: submission.appcoins?.packageName ?? submission.googleplay?.packageName,
                       purchaseToken: submission.appcoins?.purchaseToken ?? submission.googleplay?.purchaseToken ?? purchase.stripePaymentReference,
                       storeConsumed: purchase.completedAtTheStore, expiresDate: purchase.expiresDate,
                       appAccountToken: purchase.appAccountToken, app: recordedApp(of: purchase, for: submission))
    }

    /// A transaction submitted under a user other than its owner: an entitlement moves under the `transfer`
    /// policy (one owner at a time, the move answered with `item.granted` naming `transferredFrom`); otherwise it
    /// is refused, and never granted to a second account. Nil: answered with the purchase's `purchase.verified`.
    /// Its caller has checked the account token the purchase was recorded with (`accountTokenMismatch`).
    private func restore(_ record: PurchaseRecord, submission: PurchaseSubmitted) async throws -> (any PipelineEvent)? {
        switch try await store.transfer(record.key, to: submission.userId, policy: restorePolicy, at: context.now()) {
        case .alreadyOwned:
            return nil
        case .transferred(_, let items) where items.isEmpty:
            return nil // Not granted yet: the grant goes to the new owner.
        case .transferred(let from, let items):
            context.logger.info("entitlement transferred", ["transactionId": record.key.transactionId, "from": from, "to": submission.userId])
            return ItemGranted(store: record.key.store, transactionId: record.key.transactionId, userId: submission.userId, productId: record.productId,
                               productType: record.productType.rawValue, quantity: record.quantity, items: items.map { GrantedItem($0) },
                               alreadyGranted: false, transferredFrom: from, grantedAt: context.now())
        case .refused(let owner, let reason):
            let detail = reason == .ownedByAnotherUser ? "owned by user \(owner) (restore policy \(restorePolicy.rawValue))" : "transaction belongs to another user"
            return rejection(submission, Rejection(.storeRejected, detail), reason: reason.rawValue, transactionId: record.key.transactionId,
                             productId: record.productId)
        }
    }

    /// A new transaction under an original that `owner` holds, submitted by another user. `keep`: refused, nothing
    /// recorded. `transfer`: what the owner holds under that original moves first (answered with `item.granted` naming
    /// `transferredFrom`, as for a replay of the original), then the new transaction is recorded for the submitter.
    private func restoreOriginal(_ original: TransactionID, of record: PurchaseRecord, from owner: UserID,
                                 submission: PurchaseSubmitted) async throws -> (answers: [any PipelineEvent], refused: Bool) {
        // Each held purchase is judged by the lifecycle as it moves (`restore`); under `keep` none would.
        guard restorePolicy == .transfer else {
            let detail = "a restore of original transaction \(original), owned by user \(owner) (restore policy keep)"
            return ([rejection(submission, Rejection(.storeRejected, detail), reason: RefusalReason.ownedByAnotherUser.rawValue,
                               transactionId: record.key.transactionId, productId: record.productId)], true)
        }
        var held: [PurchaseRecord] = []
        for key in try await store.purchases(store: record.key.store, originalTransactionId: original, ownedBy: owner) {
            guard let purchase = try await store.purchase(key) else { continue }
            // Bound to another account: neither moved nor restored as a transaction of its own (a receipt names no account).
            if let mismatch = accountTokenMismatch(purchase, submission) { return ([mismatch], true) }
            held.append(purchase)
        }
        var answers: [any PipelineEvent] = []
        for purchase in held {
            // What is no longer in force (refunded, expired) is refused by the lifecycle and stays: not an answer to give.
            guard let moved = try await restore(purchase, submission: submission) as? ItemGranted else { continue }
            answers.append(moved)
        }
        return (answers, false)
    }

    /// The answer to a submission naming an account token other than the one `held`'s signed transaction was bound to (or,
    /// with `requireAccountToken`, naming none); nil when they agree or the transaction is bound to none. A receipt carries
    /// no token: the recorded one judges its restores.
    private func accountTokenMismatch(_ held: PurchaseRecord, _ submission: PurchaseSubmitted) -> PurchaseRejectedEvent? {
        accountTokenMismatch(held.appAccountToken, held.key.transactionId, held.productId, submission)
    }

    private func accountTokenMismatch(_ bound: AccountToken?, _ transactionId: TransactionID, _ productId: ProductID, _ submission: PurchaseSubmitted) -> PurchaseRejectedEvent? {
        guard let bound else { return nil }
        guard let named = submission.appAccountToken else {
            guard requireAccountToken else { return nil }
            return rejection(submission, Rejection(.storeRejected, "the transaction is bound to an appAccountToken and the submission names none"),
                             reason: "appAccountTokenMissing", transactionId: transactionId, productId: productId)
        }
        guard !named.isSameAccount(as: bound) else { return nil }
        return rejection(submission, Rejection(.storeRejected, "the transaction's appAccountToken is not the submitting user's"),
                         reason: "appAccountTokenMismatch", transactionId: transactionId, productId: productId)
    }

    /// The message of `event` if it matches its schema; else of the event without the informational fields a store may
    /// fill oddly (price, currency, environment, account token), logged; nil when even that does not match (the ids).
    private func conformingMessage(_ event: PurchaseVerifiedEvent) -> KafkaProducerMessage? {
        if let message = context.conformingMessage(event) { return message }
        var trimmed = event
        trimmed.price = nil
        trimmed.currency = nil
        trimmed.environment = nil
        trimmed.appAccountToken = nil
        guard let message = context.conformingMessage(trimmed) else { return nil }
        context.logger.warning("informational fields dropped: they do not fit the event schema", ["transactionId": event.transactionId])
        return message
    }

    /// The messages of `events`, its rejections kept for their users' histories (with the batch's other writes).
    private func answers(_ events: [any PipelineEvent]) async throws -> [KafkaProducerMessage] {
        try await context.outputs(events, keepingRejectionsIn: store)
    }

    /// The `submissionId` of the submission a stage makes of a charge a store announced (`announcedAs`): its causes' ids
    /// tell it from another. Never a producer's (theirs are UUIDs), so never named in a rejection (`rejection`).
    static func announcedSubmissionId(_ announcement: String) -> String { announcedPrefix + announcement }

    private static let announcedPrefix = "notification:"

    /// `purchase.rejected` for `submission`: naming its `submissionId` when a producer gave it (a store's announcement has
    /// none the producer would know, and `purchase.rejected` carries UUIDs only; its `causeId` names the notification).
    private func rejection(_ submission: PurchaseSubmitted, _ rejection: Rejection, reason: String, transactionId: TransactionID?, productId: ProductID?) -> PurchaseRejectedEvent {
        let producers = submission.submissionId.flatMap { $0.utf8.starts(with: Self.announcedPrefix.utf8) ? nil : $0 }
        return PurchaseRejectedEvent(store: submission.store, transactionId: transactionId, productId: productId, userId: submission.userId,
                                     reason: reason, retryable: rejection.isRetryable, detail: IdentifierRule.truncated(rejection.detail, maxLength: 2000),
                                     submissionId: producers, rejectedAt: context.now(),
                                     causeID: transactionId.map { "\(submission.eventID):\($0)" } ?? submission.eventID)
    }
}

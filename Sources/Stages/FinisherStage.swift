import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StoreVerification
import WorkerRuntime

/// `iap-finisher`: completes granted purchases with their store, then marks them `finished` and emits
/// `transaction.finished` (which tells the app it may call `finish()`). App Store purchases are finished
/// through the App Store Server API when it is configured; AppCoins has no server call, so its consumables
/// finish when the app reports `purchase.consumed` (or the store reported them consumed). Non-consumables and
/// subscriptions are entitlements, complete at their grant: without an API call to make they finish at once
/// (`entitlementGranted`). Never finishes a purchase that was not granted. It also answers the store's
/// consumption requests, with the consent users gave through `user.consent` (see `ConsumptionAnswers.swift`).
public struct FinisherStage: StoreBackedStage {
    public let name = "finisher"
    public let topics: [String]
    let context: StageContext
    let store: SQLPurchaseStore
    let appStoreAPI: AppStoreServerAPIClient?
    /// How long after `consumedAt` a consumption report waits for its purchase's grant (retried with backoff on
    /// its partition) before it is dead-lettered as `notGranted`. The report can overtake the grant: the app
    /// and the pipeline run concurrently, and a producer may send it right after the submission.
    let grantWait: TimeInterval
    /// What the app gives before purchase (a trial, a sample): `sampleContentProvided` in consumption answers.
    let sampleContentProvided: Bool
    /// How long after the store's request an answer waits for consent decisions still on their way.
    let consentGrace: TimeInterval

    public init(context: StageContext, store: SQLPurchaseStore, appStoreAPI: AppStoreServerAPIClient?, grantWait: TimeInterval = 600,
                sampleContentProvided: Bool = false, consentGrace: TimeInterval = 60) {
        self.context = context
        self.store = store
        self.appStoreAPI = appStoreAPI
        self.grantWait = grantWait
        self.sampleContentProvided = sampleContentProvided
        self.consentGrace = consentGrace
        self.topics = [EventType.itemGranted, .purchaseConsumed, .userConsent, .consumptionRequested].map(context.codec.topic)
    }

    public func handle(_ message: KafkaMessage) async throws -> StageResult {
        switch message.topic {
        case topics[1]:
            switch context.codec.decode(message, as: PurchaseConsumed.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let consumed):
                // Kept apart from finishing: with the App Store API a purchase is finished at its grant, before it is used.
                try await store.recordConsumed(PurchaseKey(store: consumed.store, transactionId: consumed.transactionId), at: consumed.consumedAt)
                return try await finish(store: consumed.store, transactionId: consumed.transactionId, userId: consumed.userId, method: .consumedByApp,
                                        waitForGrantUntil: consumed.consumedAt.addingTimeInterval(grantWait))
            }
        case topics[2]:
            switch context.codec.decode(message, as: UserConsent.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let consent): return try await record(consent)
            }
        case topics[3]:
            switch context.codec.decode(message, as: ConsumptionRequested.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let request): return try await answer(request)
            }
        default: break
        }
        switch context.codec.decode(message, as: ItemGranted.self) {
        case .failure(let invalid): return context.deadLetter(invalid)
        case .success(let granted):
            let key = PurchaseKey(store: granted.store, transactionId: granted.transactionId)
            guard granted.store == .appstore, let appStoreAPI else {
                // AppCoins (and App Store without API credentials): the app consumes on the device and reports it,
                // unless the store already reported it consumed when the purchase was verified; an entitlement is
                // complete at its grant.
                guard let record = try await store.purchase(key), record.state == .granted else { return .publish([]) }
                if record.productType.isEntitlement {
                    return try await finish(store: granted.store, transactionId: granted.transactionId, userId: granted.userId, method: .entitlementGranted)
                }
                guard granted.store == .appcoins, record.storeConsumed else { return .publish([]) }
                return try await finish(store: granted.store, transactionId: granted.transactionId, userId: granted.userId, method: .storeReportedConsumed)
            }
            guard let record = try await store.purchase(key) else { throw TransientError("purchase \(key) not in the store yet") }
            switch record.state {
            case .granted:
                switch await appStoreAPI.finishTransaction(granted.transactionId) {
                case .success: break
                case .failure(.unavailable(let why)): throw TransientError(why)
                case .failure(.refused(let status, let detail)):
                    return .deadLetter(reason: "storeRefusedFinish", detail: "HTTP \(status): \(detail)")
                }
                return try await finish(store: granted.store, transactionId: granted.transactionId, userId: granted.userId, method: .appStoreServerAPI)
            case .finished:
                return try await finish(store: granted.store, transactionId: granted.transactionId, userId: granted.userId, method: .appStoreServerAPI)
            default:
                // Revoked or due for refund since it was granted: nothing to finish.
                context.logger.info("not finishing", ["transactionId": granted.transactionId, "state": record.state.rawValue])
                return .publish([])
            }
        }
    }

    private func finish(store storeName: Store, transactionId: String, userId: String, method: TransactionFinished.Method,
                        waitForGrantUntil: Date? = nil) async throws -> StageResult {
        let key = PurchaseKey(store: storeName, transactionId: transactionId)
        switch try await store.finish(key, at: context.now()) {
        case .finished, .alreadyFinished:
            // Emitted again for a repeat: same ce_id, so consumers recognise it.
            return try context.messages([TransactionFinished(store: storeName, transactionId: transactionId, userId: userId,
                                                             method: method, finishedAt: context.now())])
        case .notGranted(let state) where (state == nil || state == .verified) && context.now() < (waitForGrantUntil ?? .distantPast):
            // Not recorded or not granted yet: the grant is probably on its way.
            throw TransientError("purchase \(key) is \(state?.rawValue ?? "not recorded") yet; waiting for its grant")
        case .notGranted(let state):
            return .deadLetter(reason: "notGranted", detail: "purchase \(key) is \(state?.rawValue ?? "unknown"); it is finished only once granted")
        }
    }
}

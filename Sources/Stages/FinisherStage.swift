import Foundation
import Kafka
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

/// `iap-finisher`: completes granted purchases with their store, then marks them `finished` and emits
/// `transaction.finished` (which tells the app it may call `finish()`). App Store purchases are finished
/// through the App Store Server API when it is configured; Google Play purchases are consumed (consumables) or
/// acknowledged (entitlements) through the Android Publisher API when it is; AppCoins has no server call, so its consumables
/// finish when the app reports `purchase.consumed` (or the store reported them consumed). Non-consumables and
/// subscriptions are entitlements, complete at their grant: without an API call to make they finish at once
/// (`entitlementGranted`). Never finishes a purchase that was not granted. It also answers the store's
/// consumption requests, with the consent users gave through `user.consent` (see `Stores/AppStore/ConsumptionAnswers.swift`).
public struct FinisherStage: StoreBackedStage {
    public let name = "finisher"
    public let topics: [String]
    let context: StageContext
    let store: any ConsumptionRequestRepository
    public var repository: any PurchaseRepository { store }
    /// The stores whose purchases are completed through their API, keyed by store (`Stores/<store>/`); without one a
    /// store's purchases are finished by the app's report, or at their grant.
    let completions: StoreCompletions
    /// Each App Store app's API clients, which also answer the App Store's consumption requests.
    var appStoreAPIs: PerApp<AppStoreAPIClients>? { completions.appStore?.apis }
    /// What the app gives before purchase (a trial, a sample): `sampleContentProvided` in consumption answers.
    let sampleContentProvided: Bool
    /// How long after the store's request an answer waits for consent decisions still on their way.
    let consentGrace: TimeInterval

    /// A finisher of a deployment of one App Store app (or none).
    public init(context: StageContext, store: any ConsumptionRequestRepository, appStoreAPI: AppStoreServerAPIClient?, sandboxAPI: AppStoreServerAPIClient? = nil,
                googlePlay: AndroidPublisherClient? = nil, sampleContentProvided: Bool = false, consentGrace: TimeInterval = 60) {
        self.init(context: context, store: store, appStoreAPIs: appStoreAPI.map { PerApp(single: AppStoreAPIClients(api: $0, sandbox: sandboxAPI)) },
                  googlePlay: googlePlay, sampleContentProvided: sampleContentProvided, consentGrace: consentGrace)
    }

    /// A finisher with each App Store app's API clients, and Google Play's API.
    public init(context: StageContext, store: any ConsumptionRequestRepository, appStoreAPIs: PerApp<AppStoreAPIClients>?,
                googlePlay: AndroidPublisherClient? = nil, sampleContentProvided: Bool = false, consentGrace: TimeInterval = 60) {
        self.init(context: context, store: store, completions: StoreCompletions(appStore: appStoreAPIs.map(AppStoreCompletion.init),
                                                                                googlePlay: googlePlay.map(GooglePlayCompletion.init)),
                  sampleContentProvided: sampleContentProvided, consentGrace: consentGrace)
    }

    public init(context: StageContext, store: any ConsumptionRequestRepository, completions: StoreCompletions, sampleContentProvided: Bool = false,
                consentGrace: TimeInterval = 60) {
        self.completions = completions
        self.context = context
        self.store = store
        self.sampleContentProvided = sampleContentProvided
        self.consentGrace = consentGrace
        self.topics = [EventType.itemGranted, .purchaseConsumed, .userConsent, .consumptionRequested].map(context.codec.topic)
    }

    /// A consumption report is recorded whatever came before it (kept until its purchase is granted): it does not wait
    /// behind a grant of the user's parked while the store's API fails, so that its purchase is known consumed by its deadline.
    public func keepsOrder(_ message: KafkaMessage) -> Bool { context.codec.eventType(ofTopic: message.topic) != .purchaseConsumed }

    public func handle(_ message: KafkaMessage) async throws -> StageResult {
        try await handle(message, calls: nil)
    }

    /// One store transaction for the batch (see `handleInOneTransaction`). The App Store's Finish Transaction calls for
    /// the batch's purchases that are granted are made first, as many at once as the API client has connections, and
    /// never while the transaction is open; the transaction then records what they answered.
    public func handle(batch messages: [KafkaMessage]) async -> [Result<StageResult, any Error>] {
        // Consent and consumption requests record their answers to the store around a call to it: alone, always.
        let batchable = { (message: KafkaMessage) in [.itemGranted, .purchaseConsumed].contains(context.codec.eventType(ofTopic: message.topic)) }
        guard messages.count > 1 else { return await handleInOneTransaction(messages, batchable: batchable) }
        // Decoded once, here: by offset (one partition's messages).
        var decoded: [Int64: ItemGranted] = [:]
        var reported: [Int64: PurchaseConsumed] = [:]
        for message in messages.prefix(while: batchable) {
            switch context.codec.eventType(ofTopic: message.topic) {
            case .itemGranted?: if case .success(let granted) = context.codec.decode(message, as: ItemGranted.self) { decoded[message.offset] = granted }
            case .purchaseConsumed?:
                if case .success(let consumed) = context.codec.decode(message, as: PurchaseConsumed.self) { reported[message.offset] = consumed }
            default: break
            }
        }
        var calls: [Store: [TransactionID: Result<Void, StoreAPIFailure>]] = [:]
        do {
            // Each store's calls, at once within it; by store in order (few stores, and a batch is most often of one).
            for (storeName, grants) in Dictionary(grouping: decoded.values.sorted { $0.transactionId < $1.transactionId }, by: \.store) {
                guard let completion = completions.completion(of: storeName) else { continue }
                calls[storeName] = try await completion.calls(owedBy: grants, in: store)
            }
        } catch {
            return [] // The store could not say which are granted: each message alone, retried as always.
        }
        // The reports' purchases too: read ahead, they are locked in key order with the others, as every batch locks them (a
        // report of a purchase not recorded takes its lock: in message order, it could deadlock with a verifier's batch).
        let keys = decoded.values.map { PurchaseKey(store: $0.store, transactionId: $0.transactionId) }
            + reported.values.map { PurchaseKey(store: $0.store, transactionId: $0.transactionId) }
        return await handleInOneTransaction(messages, batchable: batchable, readingAhead: keys) { message in
            try await handle(message, calls: calls, granted: decoded[message.offset], consumed: reported[message.offset])
        }
    }

    /// How purchases of `store` are completed through its API (configured here), at their grant; nil when they are not.
    func finishesThroughAPI(_ store: Store) -> FinishMethod? { completions.completion(of: store)?.method }

    /// - Parameter calls: the stores' answers already received, by store and transaction id, for a batch (nil alone). A
    ///   purchase of the batch granted since they were made has none: it fails the batch, and is finished alone.
    /// - Parameter granted: the message decoded already, when it is an `item.granted`; `consumed`, a `purchase.consumed`.
    private func handle(_ message: KafkaMessage, calls: [Store: [TransactionID: Result<Void, StoreAPIFailure>]]?,
                        granted decoded: ItemGranted? = nil, consumed reported: PurchaseConsumed? = nil) async throws -> StageResult {
        switch context.codec.eventType(ofTopic: message.topic) {
        case .purchaseConsumed?:
            switch reported.map(Result.success) ?? context.codec.decode(message, as: PurchaseConsumed.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let consumed):
                // Kept apart from finishing: with the App Store API a purchase is finished at its grant, before it is used. Recorded
                // before finishing is tried, so that a grant committed meanwhile finds it (see `finish`).
                let key = PurchaseKey(store: consumed.store, transactionId: consumed.transactionId)
                guard try await store.recordConsumed(key, at: consumed.consumedAt) == .withItsPurchase else {
                    // The report overtook the verification (by however long): its record takes the report, and the grant then
                    // finishes the purchase. Nothing to wait for on the partition, nothing bad about it.
                    context.logger.info("consumption reported before the purchase was recorded; finished at its grant", ["transactionId": consumed.transactionId])
                    return .publish([])
                }
                let throughAPI = finishesThroughAPI(consumed.store)
                // Only the API's path depends on the state: read only then (a read that is not a decision drops the batch's read-ahead).
                let state = throughAPI != nil ? try await store.states(of: [key])[key] : nil
                switch FinishPolicy.onConsumptionReport(state, finishesThroughStoreAPI: throughAPI != nil) {
                case .nothing: return .publish([])
                case .refuse: return Self.notGranted(key, state)
                case .finish, .callStoreAPI, .finishIfConsumptionReported: break
                }
                return try await finish(store: consumed.store, transactionId: consumed.transactionId, userId: consumed.userId, method: .consumedByApp,
                                        reportedConsumedAt: consumed.consumedAt)
            }
        case .userConsent?:
            switch context.codec.decode(message, as: UserConsent.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let consent): return try await record(consent)
            }
        case .consumptionRequested?:
            switch context.codec.decode(message, as: ConsumptionRequested.self) {
            case .failure(let invalid): return context.deadLetter(invalid)
            case .success(let request): return try await answer(request)
            }
        default: break
        }
        switch decoded.map(Result.success) ?? context.codec.decode(message, as: ItemGranted.self) {
        case .failure(let invalid): return context.deadLetter(invalid)
        case .success(let granted):
            let key = PurchaseKey(store: granted.store, transactionId: granted.transactionId)
            let throughAPI = finishesThroughAPI(granted.store)
            guard let record = try await store.purchase(key) else {
                // The verifier records before it emits: a missing row is a store not caught up yet. Without an API call to
                // make, nothing is owed: the grant that comes with the record finishes it.
                if throughAPI == nil { return .publish([]) }
                throw TransientError("purchase \(key.logged) not in the store yet")
            }
            let finishing = { (method: FinishMethod) in
                try await self.finish(store: granted.store, transactionId: granted.transactionId, userId: granted.userId, method: method)
            }
            switch FinishPolicy.onGrant(record, finishesThroughStoreAPI: throughAPI, reinstated: granted.reinstated == true) {
            case .finish(let method):
                return try await finishing(method)
            case .finishIfConsumptionReported:
                // The app's report may have come first (recorded then, whatever the lag): this grant is what it waited for.
                guard try await store.appReportedConsumption(key) != nil else { return .publish([]) }
                return try await finishing(.consumedByApp)
            case .nothing, .refuse:
                // Revoked or due for refund since it was granted: nothing to finish.
                context.logger.info("not finishing", ["transactionId": granted.transactionId, "state": record.state.rawValue])
                return .publish([])
            case .callStoreAPI:
                guard let completion = completions.completion(of: granted.store) else { return .publish([]) }
                return try await completion.complete(record, granted: granted, answered: calls.map { $0[granted.store] ?? [:] }, finishing: finishing)
            }
        }
    }

    /// - Parameter reportedConsumedAt: for the app's consumption report (recorded already), when it says the purchase was consumed.
    private func finish(store storeName: Store, transactionId: TransactionID, userId: UserID, method: TransactionFinished.Method,
                        reportedConsumedAt: Date? = nil) async throws -> StageResult {
        let key = PurchaseKey(store: storeName, transactionId: transactionId)
        switch try await store.finish(key, at: context.now()) {
        case .finished, .alreadyFinished:
            // Emitted again for a repeat: same ce_id, so consumers recognise it.
            return try context.messages([TransactionFinished(store: storeName, transactionId: transactionId, userId: userId,
                                                             method: method, finishedAt: context.now())])
        case .notGranted(let state?) where reportedConsumedAt != nil && FinishPolicy.awaitsGrant(state):
            // The report overtook the grant. Not bad input, and nothing to wait for: it is recorded with the purchase, so the
            // grant's `item.granted` finishes it however late that comes, and the sweeper does not flag it meanwhile. (A grant
            // committed since the report was recorded is seen by that event, or was seen by `store.finish` just now.)
            context.logger.info("consumption reported before the grant; finished at the grant", ["transactionId": transactionId])
            return .publish([])
        case .notGranted(let state):
            return Self.notGranted(key, state)
        }
    }

    /// A purchase that is not granted (and, unless `state` is verified, never will be) is not finished.
    private static func notGranted(_ key: PurchaseKey, _ state: PurchaseState?) -> StageResult {
        .deadLetter(reason: RefusalReason.notGranted.rawValue, detail: "purchase \(key) is \(state?.rawValue ?? "unknown"); it is finished only once granted")
    }
}

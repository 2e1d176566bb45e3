import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

/// Finishing App Store purchases with the App Store Server API's Finish Transaction, each app's with its own client (the
/// API's tokens name one app); a production deployment's purchases recorded in the Sandbox environment (App Review's,
/// which the verifier accepts with `--accept-sandbox`) through its app's sandbox client when it has one.
public struct AppStoreCompletion: PurchaseCompletion {
    public let apis: PerApp<AppStoreAPIClients>

    public init(apis: PerApp<AppStoreAPIClients>) { self.apis = apis }

    public var method: FinishMethod { .appStoreServerAPI }

    /// Finish Transaction for each App Store purchase of `grants` (all of the App Store) granted (and not finished) now, by
    /// transaction id.
    public func calls(owedBy grants: [ItemGranted], in store: any ConsumptionRequestRepository) async throws
        -> [TransactionID: Result<Void, StoreAPIFailure>] {
        var keys: [PurchaseKey] = []
        var seen: Set<TransactionID> = []
        var reinstated: Set<TransactionID> = []
        for granted in grants {
            if granted.reinstated == true { reinstated.insert(granted.transactionId) }
            if seen.insert(granted.transactionId).inserted { keys.append(PurchaseKey(store: .appstore, transactionId: granted.transactionId)) }
        }
        let found = try await store.statesAndEnvironments(of: keys)
        // By client: each app's, each environment's. A purchase of an app without clients here gets none (answered alone).
        var byClient: [ObjectIdentifier: (client: AppStoreServerAPIClient, ids: [TransactionID])] = [:]
        for key in keys where FinishPolicy.needsStoreAPICall(found[key]?.state, reinstated: reinstated.contains(key.transactionId)) {
            guard let client = apis.forRecorded(app: found[key]?.app)?.client(forRecorded: found[key]?.environment) else { continue }
            byClient[ObjectIdentifier(client), default: (client, [])].ids.append(key.transactionId)
        }
        // At once: a slow API (the sandbox's, another app's) must not hold the others' calls.
        return await withTaskGroup(of: [(TransactionID, Result<Void, AppStoreServerAPIClient.Failure>)].self) { group in
            for (client, ids) in byClient.values { group.addTask { Array(zip(ids, await client.finishTransactions(ids))) } }
            var answers: [TransactionID: Result<Void, AppStoreServerAPIClient.Failure>] = [:]
            for await answered in group { answers.merge(answered, uniquingKeysWith: { first, _ in first }) }
            return answers
        }
    }

    public func complete(_ record: PurchaseRecord, granted: ItemGranted, answered finishCalls: [TransactionID: Result<Void, StoreAPIFailure>]?,
                         finishing: (FinishMethod) async throws -> StageResult) async throws -> StageResult {
        guard let clients = apis.forRecorded(app: record.app) else {
            return .deadLetter(reason: "unknownApp", detail: "the purchase's app '\(record.app.map(\.rawValue) ?? "")' is not one of this finisher's "
                               + "(--apps): nothing to finish it with")
        }
        let answer: Result<Void, AppStoreServerAPIClient.Failure>
        if let finishCalls {
            // In a batch's transaction: no call to the store API while it is open.
            guard let made = finishCalls[granted.transactionId] else { throw TransientError("purchase \(record.key.logged) was granted during its batch") }
            answer = made
        } else {
            answer = await clients.client(forRecorded: record.environment).finishTransaction(granted.transactionId)
        }
        switch answer {
        case .success: break
        case .failure(.unavailable(let why, let retryAfter)): throw TransientError(why, retryAfter: retryAfter)
        case .failure(.refused(let status, let detail)):
            // A sandbox purchase (App Review's, accepted by the verifier's --accept-sandbox) is unknown to production's API.
            let hint = status == 404 && record.environment == AppStoreEnvironment.sandbox.rawValue && clients.sandbox == nil
                ? "; a Sandbox purchase: give the finisher the sandbox's API too (--appstore-sandbox-api-url) if this is production's" : ""
            return .deadLetter(reason: "storeRefusedFinish", detail: "HTTP \(status): \(detail)\(hint)")
        }
        return try await finishing(.appStoreServerAPI)
    }
}

import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// The App Store's *Get Notification History* of one environment: each notification published on `store.notification`
/// with its own event id, for the verifier to judge as if the webhook had brought it (and record it handled).
public struct AppStoreNotificationHistory: StoreHistory {
    public var environment: AppStoreEnvironment
    public var api: AppStoreServerAPIClient
    /// The app whose history it is, when it is not the deployment's primary (first) App Store app: named in the history's
    /// name and checkpoint. The primary app's keep the names they had before apps were named.
    public var app: AppID?

    public init(environment: AppStoreEnvironment, api: AppStoreServerAPIClient, app: AppID? = nil) {
        self.environment = environment
        self.api = api
        self.app = app
    }

    public var name: String { environment.rawValue + (app.map { ":\($0)" } ?? "") }
    public var checkpoint: String { "appstore.notifications.\(environment.rawValue)" + (app.map { ".\($0)" } ?? "") }
    public var kept: TimeInterval { AppStoreServerAPIClient.notificationHistoryKept(sandbox: environment != .production) }
    public var recordsPublished: Bool { false }

    public func page(from start: Date, to end: Date, token: String?, readAt: Date) async -> Result<StoreHistoryPage, StoreHistoryFailure> {
        switch await api.notificationHistory(from: start, to: end, paginationToken: token) {
        case .success(let page):
            let entries = page.signedPayloads.map { payload in
                let received = StoreNotificationReceived(signedPayload: payload, receivedAt: readAt)
                return StoreHistoryPage.Entry(id: received.notificationID, event: received)
            }
            return .success(.init(entries: entries, nextToken: page.paginationToken))
        case .failure(.unavailable(let why, let retryAfter)): return .failure(.unavailable(why, retryAfter: retryAfter))
        case .failure(.refused(let status, let detail)): return .failure(.refused("notification history: HTTP \(status) \(detail)"))
        }
    }
}

import Foundation
import JSON
import PurchaseDomain

/// One page of *Get Notification History*: the notifications the App Store attempted to send in a timespan.
public struct NotificationHistoryPage: Sendable, Equatable {
    /// Each notification's `signedPayload`, as it was (or would have been) posted to the server.
    public var signedPayloads: [String]
    /// The token of the next page; nil on the last.
    public var paginationToken: String?

    public init(signedPayloads: [String], paginationToken: String?) {
        self.signedPayloads = signedPayloads
        self.paginationToken = paginationToken
    }
}

extension AppStoreServerAPIClient {
    /// How far back the App Store keeps notification history: 180 days in production, 30 in the sandbox.
    public static func notificationHistoryKept(sandbox: Bool) -> TimeInterval { (sandbox ? 30 : 180) * 86_400 }

    /// `POST /inApps/v1/notifications/history` (*Get Notification History*): the version 2 notifications the App Store
    /// attempted to send between `start` and `end` (at most 20 a page), the next page named by `paginationToken`.
    public func notificationHistory(from start: Date, to end: Date, paginationToken: String? = nil) async -> Result<NotificationHistoryPage, Failure> {
        let body: [String: JSONValue] = ["startDate": .integer(EpochMilliseconds.milliseconds(start)), "endDate": .integer(EpochMilliseconds.milliseconds(end))]
        var path = "inApps/v1/notifications/history"
        if let paginationToken {
            guard let escaped = paginationToken.addingPercentEncoding(withAllowedCharacters: .urlUnreserved) else {
                return .failure(.refused(status: 0, detail: "the pagination token cannot be sent"))
            }
            path += "?paginationToken=" + escaped
        }
        return await call("POST", path, body: Data(JSONValue.object(body).serialized)).flatMap { answer in
            guard let fields = JSONValue.parse(answer)?.objectValue, let records = fields["notificationHistory"]?.arrayValue else {
                return .failure(.unavailable("App Store Server API: a notification history that is not a NotificationHistoryResponse"))
            }
            let payloads = records.compactMap { $0.objectValue?["signedPayload"]?.stringValue }
            guard fields["hasMore"]?.boolValue == true else { return .success(NotificationHistoryPage(signedPayloads: payloads, paginationToken: nil)) }
            // More to read and no way to ask for it: not the end of the history.
            guard let token = fields["paginationToken"]?.stringValue, !token.isEmpty else {
                return .failure(.unavailable("App Store Server API: a notification history page with more to read and no pagination token"))
            }
            return .success(NotificationHistoryPage(signedPayloads: payloads, paginationToken: token))
        }
    }
}

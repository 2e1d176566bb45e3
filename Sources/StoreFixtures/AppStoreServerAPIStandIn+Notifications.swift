import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPServer
import JSON

/// The stand-in's notification endpoints, as Apple documents them:
/// - `POST /inApps/v1/notifications/history[?paginationToken=…]` → the notifications recorded with `recordNotification`
///   in the request's timespan, oldest first, `historyPageSize` a page (Apple: 20); 400 with Apple's error code for a
///   start before the history kept (180 days), a start not before the end, or a token of another request.
/// - `POST /inApps/v1/notifications/test` → a token; the `TEST` notification is then posted to the URL given to
///   `sendTestNotifications` as the App Store posts notifications (404 `ServerNotificationURLNotFoundError` without one).
/// - `GET /inApps/v1/notifications/test/{token}` → the notification as sent and each attempt's result (404
///   `TestNotificationNotFoundError` for a token it never gave).
extension AppStoreServerAPIStandIn {
    /// Adds a notification to the history as sent at `date` (whether or not anybody received it).
    public func recordNotification(_ signedPayload: String, at date: Date = Date()) {
        recorder.update { $0.history.append((signedPayload, date)) }
    }

    /// How many notifications a page of history holds.
    public func setHistoryPageSize(_ size: Int) { recorder.update { $0.historyPageSize = max(1, size) } }

    /// Where requested test notifications are posted (the server's notification URL), each signed by `sign` from its
    /// notification UUID.
    public func sendTestNotifications(to url: URL, signing sign: @escaping @Sendable (String) throws -> String) {
        recorder.update { $0.testNotificationTarget = (url, sign) }
    }

    /// The answer to a notification endpoint, or nil for another path.
    static func notificationRoutes(_ request: HTTPRequest, _ path: [String], _ recorder: Recorder) -> HTTPResponse? {
        guard path.count >= 4, path[0] == "inApps", path[1] == "v1", path[2] == "notifications" else { return nil }
        switch (request.method, path[3], path.count) {
        case ("POST", "history", 4): return recorder.read { history(request, $0.history, pageSize: $0.historyPageSize) }
        case ("POST", "test", 4): return requestTest(recorder)
        case ("GET", "test", 5):
            guard let sent = recorder.read({ $0.testNotifications[path[4]] }) else {
                return error(404, 4040008, "Either the test notification token is expired or the notification and status are not yet available.")
            }
            let attempts = sent.attempts.map { JSONValue.object(["attemptDate": .integer(AppStorePayloads.milliseconds($0.date)),
                                                                 "sendAttemptResult": .string($0.result)]) }
            return HTTPResponse(status: 200, contentType: "application/json", body: String(decoding: JSONValue.object([
                "signedPayload": .string(sent.signedPayload), "sendAttemptResults": .array(attempts)]).serialized, as: UTF8.self))
        default: return nil
        }
    }

    /// A test notification requested: signed, recorded under a new token, and posted in the background.
    private static func requestTest(_ recorder: Recorder) -> HTTPResponse {
        guard let target = recorder.read({ $0.testNotificationTarget }) else {
            return error(404, 4040007, "An error that indicates the App Store server couldn't find a notifications URL for your app in this environment.")
        }
        let token = UUID().uuidString.lowercased()
        let signedPayload: String
        do { signedPayload = try target.sign(UUID().uuidString.lowercased()) } catch { return Self.error(500, 5000000, "An unknown error occurred.") }
        recorder.update { $0.testNotifications[token] = (signedPayload, []) }
        post(signedPayload, to: target.url) { result in recorder.update { $0.testNotifications[token]?.attempts.append((Date(), result)) } }
        return HTTPResponse(status: 200, contentType: "application/json", body: #"{"testNotificationToken":"\#(token)"}"#)
    }

    /// Posts `{"signedPayload": …}` as the App Store does, in the background (on URLSession's queue, not the cooperative
    /// pool, which a busy test process may hold); `done` gets the attempt's result as Apple names it.
    private static func post(_ signedPayload: String, to url: URL, done: @escaping @Sendable (String) -> Void) {
        var request = URLRequest(url: url, timeoutInterval: 10)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(JSONValue.object(["signedPayload": .string(signedPayload)]).serialized)
        URLSession.shared.dataTask(with: request) { _, response, _ in
            guard let status = (response as? HTTPURLResponse)?.statusCode else { return done("NO_RESPONSE") }
            done(status == 200 ? "SUCCESS" : "UNSUCCESSFUL_HTTP_RESPONSE_CODE")
        }.resume()
    }

    /// A page of notification history as Apple answers it (`NotificationHistoryResponse`), or its error.
    static func history(_ request: HTTPRequest, _ history: [(signedPayload: String, at: Date)], pageSize: Int) -> HTTPResponse {
        func error(_ code: Int, _ message: String) -> HTTPResponse { Self.error(400, code, message) }
        guard let body = JSONValue.parse(Array(request.body))?.objectValue, let start = body["startDate"]?.int64Value,
              let requestedEnd = body["endDate"]?.int64Value else { return error(4000000, "Invalid request.") }
        let now = AppStorePayloads.milliseconds(Date())
        guard start >= now - 180 * 86_400_000 else { return error(4000012, "Invalid request. The start date is earlier than the allowed start date.") }
        guard start < requestedEnd else { return error(4000013, "Invalid request. The end date precedes the start date or the dates are the same.") }
        let end = min(requestedEnd, now) // an end in the future is taken as now
        var offset = 0
        if let token = request.query?.split(separator: "&").first(where: { $0.hasPrefix("paginationToken=") })?.dropFirst("paginationToken=".count) {
            // The token names the request it continues: another request's is refused.
            let parts = token.split(separator: ".")
            guard parts.count == 3, Int64(parts[0]) == start, Int64(parts[1]) == requestedEnd, let next = Int(parts[2]), next >= 0 else {
                return error(4000014, "Invalid request. The pagination token is invalid.")
            }
            offset = next
        }
        let matching = history.filter { let at = AppStorePayloads.milliseconds($0.at); return at >= start && at < end }
            .sorted { $0.at < $1.at }
        let page = matching.dropFirst(offset).prefix(pageSize)
        let more = offset + page.count < matching.count
        var response: [String: JSONValue] = [
            "notificationHistory": .array(page.map { .object(["signedPayload": .string($0.signedPayload),
                                                             "sendAttemptResults": .array([.object(["attemptDate": .integer(AppStorePayloads.milliseconds($0.at)),
                                                                                                   "sendAttemptResult": .string("NO_RESPONSE")])])]) }),
            "hasMore": .bool(more),
        ]
        if more { response["paginationToken"] = .string("\(start).\(requestedEnd).\(offset + page.count)") }
        return HTTPResponse(status: 200, contentType: "application/json", body: String(decoding: JSONValue.object(response).serialized, as: UTF8.self))
    }
}

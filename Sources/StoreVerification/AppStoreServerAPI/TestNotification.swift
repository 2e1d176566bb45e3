import Foundation
import JSON

/// What the App Store says of a test notification it was asked to send (*Get Test Notification Status*).
public struct TestNotificationStatus: Sendable, Equatable {
    /// One attempt to post it to the server's URL: when, and `SUCCESS` or why not (`NO_RESPONSE`, `TIMED_OUT`, `TLS_ISSUE`,
    /// `UNSUCCESSFUL_HTTP_RESPONSE_CODE`, …).
    public struct Attempt: Sendable, Equatable {
        public var date: Date?
        public var result: String

        public init(date: Date?, result: String) {
            self.date = date
            self.result = result
        }
    }

    /// The notification as sent.
    public var signedPayload: String?
    public var attempts: [Attempt]

    public init(signedPayload: String?, attempts: [Attempt]) {
        self.signedPayload = signedPayload
        self.attempts = attempts
    }

    /// Whether an attempt reached the server and was answered 200.
    public var delivered: Bool { attempts.contains { $0.result == "SUCCESS" } }
}

extension AppStoreServerAPIClient {
    /// `POST /inApps/v1/notifications/test` (*Request a Test Notification*): the App Store sends a `TEST` notification to
    /// the app's server URL for this environment; the token names it for `testNotificationStatus`.
    public func requestTestNotification() async -> Result<String, Failure> {
        await call("POST", "inApps/v1/notifications/test", body: nil).flatMap { answer in
            guard let token = JSONValue.parse(answer)?.objectValue?["testNotificationToken"]?.stringValue, !token.isEmpty else {
                return .failure(.unavailable("App Store Server API: a test notification request answered without its token"))
            }
            return .success(token)
        }
    }

    /// `GET /inApps/v1/notifications/test/{testNotificationToken}` (*Get Test Notification Status*).
    public func testNotificationStatus(_ token: String) async -> Result<TestNotificationStatus, Failure> {
        guard let escaped = token.addingPercentEncoding(withAllowedCharacters: .urlUnreserved), !escaped.isEmpty else {
            return .failure(.refused(status: 0, detail: "the test notification token cannot be sent"))
        }
        return await call("GET", "inApps/v1/notifications/test/" + escaped, body: nil).flatMap { answer in
            guard let fields = JSONValue.parse(answer)?.objectValue else {
                return .failure(.unavailable("App Store Server API: a test notification status that is not a CheckTestNotificationResponse"))
            }
            let attempts = (fields["sendAttemptResults"]?.arrayValue ?? []).compactMap { item -> TestNotificationStatus.Attempt? in
                guard let object = item.objectValue, let result = object["sendAttemptResult"]?.stringValue else { return nil }
                return .init(date: object["attemptDate"]?.int64Value.map { Date(timeIntervalSince1970: Double($0) / 1000) }, result: result)
            }
            return .success(TestNotificationStatus(signedPayload: fields["signedPayload"]?.stringValue, attempts: attempts))
        }
    }
}

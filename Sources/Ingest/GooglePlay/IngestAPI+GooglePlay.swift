import Foundation
import HTTPServer
import JSON
import PurchaseDomain
import PurchaseEvents
import StoreVerification

extension IngestAPI {
    /// A Pub/Sub push of a Google Play real-time developer notification: authenticated, its data decoded, published. What
    /// the data says is judged by the verifier (which dead-letters what is not a notification of one of the apps), so that
    /// nothing Google sent is lost to a refusal here and redelivered for days.
    func googlePlayNotification(_ request: HTTPRequest) async -> HTTPResponse {
        guard let push = configuration.googlePlayPush else { return Self.error(404, "notFound", "Google Play notifications are not configured") }
        if let refusal = await push.refusal(request.header("authorization")) {
            logger.warning("Google Play push refused", ["reason": refusal])
            return Self.error(401, "unauthenticated", "the push's OIDC token is not valid for this endpoint")
        }
        let text: String
        switch developerNotification(request.body) {
        case .refused(let refusal): return refusal
        case .accepted(let decoded): text = decoded
        }
        let token = GooglePlayDeveloperNotification(json: text)?.purchaseToken
        return await publish(StoreNotificationReceived(developerNotification: text, purchaseToken: token, receivedAt: Date()), status: 200)
    }

    /// The decoded data of a push's body (`{"message": {"data": "<base64>", "messageId": …}, "subscription": …}`), or
    /// the answer that refuses the body.
    func developerNotification(_ body: Data) -> Admission<String> {
        let limit = configuration.maxNotificationPayloadBytes
        if let refusal = oversized(body, path: "/v1/googleplay/notifications") { return .refused(refusal) }
        let object: [String: JSONValue]
        switch Self.jsonObject(body, keeping: ["message"]) {
        case .accepted(let parsed): object = parsed
        case .refused(let refusal): return .refused(refusal)
        }
        guard let encoded = object["message"]?.objectValue?["data"]?.stringValue, let data = Data(base64Encoded: encoded),
              let text = String(data: data, encoding: .utf8), !text.isEmpty else {
            return .refused(Self.error(400, "missingData", "expected a Pub/Sub push: {\"message\": {\"data\": \"<base64>\"}}"))
        }
        guard data.count <= limit else { return .refused(Self.error(413, "payloadTooLarge", "the notification is larger than \(limit) bytes")) }
        return .accepted(text)
    }
}

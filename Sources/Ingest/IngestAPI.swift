import Crypto
import Foundation
import HTTPServer
import JSON
import Kafka
import Metrics
import PurchaseEvents
import RequestSigning
import StoreVerification
import Synchronization
import WorkerRuntime

/// `iap-ingest`'s HTTP API: turns store webhooks and client submissions into pipeline events.
///
/// - `POST /v1/appstore/notifications` takes App Store Server Notifications V2 (`{"signedPayload": "…"}`)
///   and publishes a `store.notification` event; 200 once the broker acknowledged it.
/// - `POST /v1/googleplay/notifications` (when configured) takes Google Play's real-time developer notifications as
///   Cloud Pub/Sub pushes them, authenticated by the push's OIDC token (401 otherwise), and publishes a
///   `store.notification` event keyed by the purchase's token; 200 once the broker acknowledged it.
/// - `POST /v1/stripe/webhooks` (when configured) takes Stripe's webhook deliveries, signed (`Stripe-Signature`) with one
///   of the endpoint's secrets (400 otherwise), and publishes each event of a type the pipeline acts on as a
///   `store.notification` whose id is Stripe's event id, keyed by the purchase it concerns; 200 once the broker
///   acknowledged it (other types: 200, not published).
/// - `POST /v1/purchases` takes a `purchase.submitted` body (`submittedAt` and `source` may be left out)
///   and publishes it; 202 once the broker acknowledged it (verification follows in `iap-verifier`).
///
/// It verifies nothing itself, but never publishes an event its schema refuses (400 with the reason).
/// When the broker does not acknowledge in time it answers 503: the caller retries (Apple does for days),
/// and because `ce_id` is derived from the content, a retry of an event that did arrive after all is
/// recognisably the same event.
public final class IngestAPI: Sendable {
    public struct Configuration: Sendable {
        /// When set, `POST /v1/purchases` requires a `RequestSignature` under it (method, path, query, timestamp
        /// and body, within the replay window).
        public var clientSecret: Data?
        /// How far a signed request's timestamp may be from the server's clock.
        public var signatureTolerance: TimeInterval
        /// Longest `signedPayload` of a notification: what the verifier accepts (a compact JWS of 64 KiB); also the
        /// longest Google Play notification.
        public var maxNotificationPayloadBytes: Int
        /// When set, `POST /v1/googleplay/notifications` takes Google Play's real-time developer notifications pushed by
        /// Pub/Sub, authenticated by this; unset, the route is not served.
        public var googlePlayPush: PubSubPushAuthenticator?
        /// When set, `POST /v1/stripe/webhooks` takes Stripe's webhook deliveries signed under its secrets; unset, the
        /// route is not served.
        public var stripeWebhook: StripeWebhookSignature?

        public init(clientSecret: Data? = nil, signatureTolerance: TimeInterval = RequestSignature.defaultTolerance, maxNotificationPayloadBytes: Int = 64 * 1024,
                    googlePlayPush: PubSubPushAuthenticator? = nil, stripeWebhook: StripeWebhookSignature? = nil) {
            self.googlePlayPush = googlePlayPush
            self.stripeWebhook = stripeWebhook
            self.clientSecret = clientSecret
            self.signatureTolerance = signatureTolerance
            self.maxNotificationPayloadBytes = maxNotificationPayloadBytes
        }
    }

    let configuration: Configuration
    private let publisher: EventPublisher
    let logger: Logger
    let metrics: MetricsRegistry
    private let lastFailure = Mutex<ContinuousClock.Instant?>(nil)
    private let answered = Atomic<Int>(0)

    public init(configuration: Configuration, publisher: EventPublisher, logger: Logger, metrics: MetricsRegistry) {
        self.configuration = configuration
        self.publisher = publisher
        self.logger = logger
        self.metrics = metrics
        Self.declareRequestMetrics(metrics)
        if configuration.stripeWebhook != nil { Self.declareStripeMetrics(metrics) }
        metrics.declare("iap_ingest_request_duration_seconds", .histogram, help: "Time to answer, broker acknowledgement included, by route.")
    }

    /// The API's routes; nil for paths it does not serve.
    public func route(_ request: HTTPRequest) async -> HTTPResponse? {
        guard let route = routeName(request.path) else { return nil }
        let started = ContinuousClock.now
        let response: HTTPResponse
        if request.method != "POST" {
            response = Self.error(405, "methodNotAllowed", "use POST")
        } else if route == "notifications" {
            response = await notification(request)
        } else if route == "googleplay" {
            response = await googlePlayNotification(request)
        } else if route == "stripe" {
            response = await stripeWebhook(request)
        } else {
            response = await submission(request)
        }
        metrics.increment("iap_ingest_requests_total", ["route": route, "status": String(response.status)])
        metrics.observe("iap_ingest_request_duration_seconds", ["route": route], duration: ContinuousClock.now - started)
        answered.add(1, ordering: .relaxed)
        return response
    }

    /// The body limit of each route that takes less than the server's `--max-body-bytes`, by path: a notification's body
    /// is refused on its `Content-Length`, before a byte of it is read, when it is larger than the verifier accepts with
    /// the room around it. Nil for other paths (their limit is the server's).
    public func bodyLimit(path: String) -> HTTPServer.BodyLimit? {
        let limit = configuration.maxNotificationPayloadBytes
        switch path {
        case "/v1/appstore/notifications":
            return HTTPServer.BodyLimit(bytes: limit + Self.notificationEnvelopeBytes, refusal: Self.error(
                413, "payloadTooLarge", "the body is larger than a signedPayload of the \(limit) bytes the verifier accepts"))
        case "/v1/googleplay/notifications" where configuration.googlePlayPush != nil:
            return HTTPServer.BodyLimit(bytes: limit * 4 / 3 + Self.notificationEnvelopeBytes, refusal: Self.error(
                413, "payloadTooLarge", "the push is larger than a notification of the \(limit) bytes the verifier accepts"))
        case "/v1/stripe/webhooks" where configuration.stripeWebhook != nil:
            return HTTPServer.BodyLimit(bytes: Self.maxStripeEventBytes, refusal: Self.error(
                413, "payloadTooLarge", "the event is larger than the \(Self.maxStripeEventBytes) bytes the pipeline takes"))
        default:
            return nil
        }
    }

    /// The refusal of a body over its path's `bodyLimit`; nil when it is within (or the path has none).
    func oversized(_ body: Data, path: String) -> HTTPResponse? {
        guard let limit = bodyLimit(path: path), body.count > limit.bytes else { return nil }
        return limit.refusal
    }

    /// The name of the route serving `path` in the metrics; nil for paths the API does not serve.
    func routeName(_ path: String) -> String? {
        switch path {
        case "/v1/appstore/notifications": "notifications"
        case "/v1/purchases": "purchases"
        case "/v1/googleplay/notifications" where configuration.googlePlayPush != nil: "googleplay"
        case "/v1/stripe/webhooks" where configuration.stripeWebhook != nil: "stripe"
        default: nil
        }
    }

    /// Counts an answer the HTTP server gave before the API saw the request (`HTTPServer.Configuration.onRefusal`): a body
    /// over its limit, the body budget or the connections spent, a malformed request. Route `other` when the path is not
    /// one of the API's or was not read.
    public func countRefusal(status: Int, path: String?) {
        metrics.increment("iap_ingest_requests_total", ["route": path.flatMap(routeName) ?? "other", "status": String(status)])
    }

    /// The request counter every route of the ingest counts in.
    static func declareRequestMetrics(_ metrics: MetricsRegistry) {
        metrics.declare("iap_ingest_requests_total", .counter, help: "Requests to the ingest API, by route and status.")
    }

    /// Room around the signed payload in a notification's body (`{"signedPayload": "…"}`, whitespace).
    static let notificationEnvelopeBytes = 1_024

    /// The most JSON values a request body may hold once parsed (a valid submission holds at most 16, a notification
    /// keeps 2). Unbounded, a body of `[[0],[0],…]` holds a value per 2 bytes, each of which takes tens of bytes.
    static let maxBodyValues = 256

    /// The members of a notification's body the pipeline reads (Apple's V2 body has no other).
    static let notificationMembers: Set<String> = ["signedPayload"]

    /// Requests the API routes answered since it started.
    public var answeredRequests: Int { answered.load(ordering: .relaxed) }

    /// Whether the last publish failed for a broker reason within the last 10 seconds.
    public var recentlyFailed: Bool {
        lastFailure.withLock { $0.map { ContinuousClock.now - $0 < .seconds(10) } ?? false }
    }

    private func notification(_ request: HTTPRequest) async -> HTTPResponse {
        let event: StoreNotificationReceived
        switch notificationPayload(request.body) {
        case .refused(let refusal): return refusal
        case .accepted(let payload): event = StoreNotificationReceived(signedPayload: payload, receivedAt: Date())
        }
        return await publish(consume event, status: 200)
    }

    /// The `signedPayload` of a notification's body, or the answer that refuses the body. Not async, so that the parsed
    /// body is gone before the publish waits for the broker.
    ///
    /// The body is reduced to `signedPayload` as it is parsed: other members are checked to be JSON and dropped unbuilt,
    /// not refused, so that a member Apple adds to the V2 body one day does not turn every notification into a 400 (and
    /// days of Apple's retries); the event never carried any but the payload.
    func notificationPayload(_ body: Data) -> Admission<String> {
        // Refused unparsed: a body the verifier would refuse anyway is not worth a parse.
        if let refusal = oversized(body, path: "/v1/appstore/notifications") { return .refused(refusal) }
        let object: [String: JSONValue]
        switch Self.jsonObject(body, keeping: Self.notificationMembers) {
        case .accepted(let parsed): object = parsed
        case .refused(let refusal): return .refused(refusal)
        }
        guard let payload = object["signedPayload"]?.stringValue else {
            return .refused(Self.error(400, "missingSignedPayload", "expected {\"signedPayload\": \"<JWS>\"}"))
        }
        guard payload.utf8.count <= configuration.maxNotificationPayloadBytes else {
            return .refused(Self.error(413, "payloadTooLarge", "signedPayload is larger than the \(configuration.maxNotificationPayloadBytes) bytes the verifier accepts"))
        }
        guard Self.looksLikeCompactJWS(payload) else {
            return .refused(Self.error(400, "malformedSignedPayload", "signedPayload is not a compact JWS (three base64url segments)"))
        }
        return .accepted(payload)
    }

    private func submission(_ request: HTTPRequest) async -> HTTPResponse {
        if let secret = configuration.clientSecret,
           case .failure(let refusal) = RequestSignature.verify(request, secret: secret, tolerance: configuration.signatureTolerance) {
            return Self.error(401, "badSignature", refusal.detail)
        }
        let submission: PurchaseSubmitted
        switch submitted(request.body) {
        case .refused(let refusal): return refusal
        case .accepted(let submitted): submission = submitted
        }
        return await publish(consume submission, status: 202)
    }

    /// A submission's body as the event, or the answer that refuses it. Not async, so that the parsed body is gone before
    /// the publish waits for the broker.
    func submitted(_ body: Data) -> Admission<PurchaseSubmitted> {
        var object: [String: JSONValue]
        switch Self.jsonObject(body) {
        case .accepted(let parsed): object = parsed
        case .refused(let refusal): return .refused(refusal)
        }
        // What a client cannot know or need not say: filled in here, then the whole checked against the schema.
        if object["submittedAt"] == nil { object["submittedAt"] = .string(RFC3339.format(Date())) }
        if object["source"] == nil { object["source"] = .string(SubmissionSource.client.rawValue) }
        switch publisher.codec.decode(JSONValue.object(object), as: PurchaseSubmitted.self) {
        case .failure(let invalid): return .refused(Self.error(400, invalid.reason, invalid.detail))
        case .success(let submission): return .accepted(submission)
        }
    }

    /// Publishes `event`, which is let go once its message is queued (what a request holds while the broker is slow to
    /// acknowledge is what bounds the ingest's memory under a flood).
    func publish<Event: PipelineEvent>(_ event: consuming Event, status: Int) async -> HTTPResponse {
        let id = event.eventID
        do {
            let report = try await publisher.publish(consume event)
            return Self.json(status, ["id": .string(id), "topic": .string(report.topic),
                                      "partition": .integer(Int64(report.partition)), "offset": .integer(report.offset)])
        } catch let invalid as EventPublisher.InvalidEvent {
            return Self.error(400, "schemaViolation", invalid.violations.prefix(5).joined(separator: "; "))
        } catch {
            lastFailure.withLock { $0 = .now }
            logger.warning("not acknowledged by the broker", ["eventId": id, "error": "\(error)"])
            var response = Self.error(503, "brokerUnavailable", "the event was not acknowledged; retry (the same content keeps the same id)")
            response.headers["Retry-After"] = "5"
            return response
        }
    }

    /// What a request brings, or the answer that refuses it.
    enum Admission<Value> {
        case accepted(Value)
        case refused(HTTPResponse)
    }

    /// A request body read as a JSON object of at most `maxBodyValues` values (with `keeping`, only those members), or
    /// the 400 that says why it is not one.
    static func jsonObject(_ body: Data, keeping: Set<String>? = nil) -> Admission<[String: JSONValue]> {
        switch JSONValue.parseDocument(body, maxValues: maxBodyValues, keeping: keeping) {
        case .success(.object(let object)): return .accepted(object)
        case .success: return .refused(error(400, "invalidJSON", "the body must be a JSON object"))
        case .failure(let parse): return .refused(error(400, parse.reason, "the body must be a JSON object: \(parse)"))
        }
    }

    static func looksLikeCompactJWS(_ text: String) -> Bool {
        let segments = text.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        return segments.count == 3 && segments.allSatisfy { segment in
            !segment.isEmpty && segment.allSatisfy { byte in
                (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2D || byte == 0x5F
            }
        }
    }

    static func error(_ status: Int, _ reason: String, _ detail: String) -> HTTPResponse {
        json(status, ["error": .string(reason), "detail": .string(detail)])
    }

    static func json(_ status: Int, _ object: [String: JSONValue]) -> HTTPResponse {
        let body = Data(JSONValue.object(object).serialized)
        return HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: body)
    }
}

import Foundation
import HTTPClient
import Kafka
import PurchaseDomain
import PurchaseEvents
import RequestSigning
import WorkerRuntime

/// `iap-webhooks`, one endpoint: POSTs each event it takes to the endpoint as a CloudEvent over HTTP (binary mode: the
/// event's JSON as the body, its attributes as `ce-*` headers), signed with the endpoint's secret as the ingest's
/// requests are (`RequestSignature`). A 2xx delivers it. A connection that fails, a timeout, `408`, `429`, a `5xx` or any
/// other answer that a fix on the receiver's side can change is retried on the partition, parked once the retry budget is
/// spent (holding the user's later events behind it), and dead-lettered at the end of the parked budget; `400`, `413`,
/// `415` and `422` say the event itself is refused: dead-lettered at once, with the answer. Each endpoint has its own
/// consumer group, so one that is down holds back no other.
///
/// An endpoint may take the events of some of the deployment's apps only (`AppScope`).
///
/// Delivery is at least once, repeats included: a grant answered `alreadyGranted` may be the only `item.granted` of its
/// purchase (the granter stopped after its commit and before its publish), so it is sent like the first, with the same
/// `ce-id`; a worker stopped between the answer and its commit sends the event again. Receivers act once per `ce-id`.
public struct WebhookStage: MessageStage {
    /// An endpoint as the stage sends to it.
    public struct Endpoint: Sendable {
        public var name: String
        public var url: URL
        public var secret: Data
        public var events: [EventType]

        public init(name: String, url: URL, secret: Data, events: [EventType]) {
            self.name = name
            self.url = url
            self.secret = secret
            self.events = events
        }
    }

    /// The apps an endpoint takes the events of, in a deployment of several apps: an event goes to it when its purchase was
    /// bought in one of them. A grant names its app; the other events' purchases are read from the store (one whose purchase
    /// is not recorded goes to none). An adjustment goes to it when one of its items is a currency or entitlement that a
    /// product of one of its apps gives.
    public struct AppScope: Sendable {
        public var apps: Set<AppID>
        /// The app of purchases recorded without one (`AppDirectory.primary`).
        public var primary: AppID
        public var purchases: any PurchaseRepository
        /// The currencies and the entitlements the products of `apps` give (their catalogs').
        public var currencies: Set<ItemCode>, entitlements: Set<ItemCode>

        public init(apps: Set<AppID>, primary: AppID, purchases: any PurchaseRepository, currencies: Set<ItemCode>, entitlements: Set<ItemCode>) {
            self.apps = apps
            self.primary = primary
            self.purchases = purchases
            self.currencies = currencies
            self.entitlements = entitlements
        }
    }

    public let name: String
    public let topics: [String]
    let endpoint: Endpoint
    let client: HTTPClient
    let context: StageContext
    /// Nil: every event of the chosen types.
    let scope: AppScope?
    /// What became of each event taken: its type and `WebhookOutcome`.
    let observe: @Sendable (EventType, WebhookOutcome) -> Void
    /// Delivered ahead of a batch's answered prefix (see `handle(batch:)`).
    let answeredAhead = AnsweredAhead()
    /// Requests on their way, at most the client's connections.
    let permits: SendPermits
    /// The URL's path and query as sent: what the signature covers.
    let signedPath: String, signedQuery: String?

    public init(context: StageContext, endpoint: Endpoint, client: HTTPClient, scope: AppScope? = nil,
                observe: @escaping @Sendable (EventType, WebhookOutcome) -> Void = { _, _ in }) {
        self.scope = scope
        permits = SendPermits(client.maxConnections)
        self.name = "webhook-" + endpoint.name
        self.topics = endpoint.events.map(context.codec.topic)
        self.endpoint = endpoint
        self.client = client
        self.context = context
        self.observe = observe
        let components = URLComponents(url: endpoint.url, resolvingAgainstBaseURL: false)
        let path = components?.percentEncodedPath ?? ""
        signedPath = path.isEmpty ? "/" : path
        signedQuery = components?.percentEncodedQuery
    }

    /// The HTTP client of an endpoint: its answers are read for their status and the start of their body (what a refusal's
    /// dead letter keeps), so a long body is cut, never a failure of an event the receiver took. `proxy`: what its requests
    /// go through (none for an endpoint on this machine: the events, signed, must not leave it).
    public static func client(timeoutSeconds: Int, connections: Int, proxy: HTTPClient.Proxy) -> HTTPClient {
        HTTPClient(timeout: .seconds(timeoutSeconds), maxConnections: connections, maxBodyBytes: 4096, truncatingBody: true, proxy: proxy)
    }

    public func handle(_ message: KafkaMessage) async throws -> StageResult {
        if let result = answeredAhead.take(message) { return result }
        guard let type = context.codec.eventType(ofTopic: message.topic) else { return .publish([]) }
        switch try await forwards(message, type: type) {
        case .failure(let invalid):
            observe(type, .invalid)
            return context.deadLetter(invalid)
        case .success(false):
            observe(type, .skipped)
            return .publish([])
        case .success(true): break
        }
        await permits.acquire()
        let answer = await client.send(request(for: message, sentAt: context.now()))
        permits.release()
        switch answer {
        case .failure(let failure):
            observe(type, .failed)
            throw TransientError("webhook \(endpoint.name): \(failure)")
        case .success(let response):
            switch WebhookAnswer(status: response.status) {
            case .delivered:
                observe(type, .delivered)
                return .publish([])
            case .retry:
                observe(type, .failed)
                throw TransientError("webhook \(endpoint.name) answered \(response.status)", retryAfter: response.retryAfter)
            case .refused:
                observe(type, .refused)
                let answer = String(decoding: response.body.prefix(300), as: UTF8.self)
                return .deadLetter(reason: "webhookRefused", detail: "endpoint \(endpoint.name) answered \(response.status) to \(type.ceType): \(answer)")
            }
        }
    }

    /// Whether `message` is sent: a valid event of `type`, of an app the endpoint takes. What is not a valid event (a foreign producer's mistake) is never signed and sent on: it is dead-lettered, as every stage does.
    func forwards(_ message: KafkaMessage, type: EventType) async throws -> Result<Bool, EventCodec.Invalid> {
        // Validated, not decoded into its model: the bytes go on as they are, and only the app or the purchase is read.
        let decoded: Result<Concerns, EventCodec.Invalid> = context.codec.validated(message, as: type).flatMap { json in
            let fields = json.objectValue ?? [:]
            func purchase(_ id: String) -> Concerns? {
                guard let store = fields["store"]?.stringValue.flatMap(Store.init(rawValue:)), let transaction = fields[id]?.stringValue else { return nil }
                return .purchase(PurchaseKey(store: store, transactionId: TransactionID(transaction)))
            }
            let concerns: Concerns? = switch type {
            case .itemGranted: .app(fields["app"]?.stringValue.map { AppID($0) })
            case .userAdjusted:
                .items((fields["items"]?.arrayValue ?? []).compactMap { item in
                    guard let fields = item.objectValue, let kind = fields["kind"]?.stringValue.flatMap(GrantItem.Kind.init(rawValue:)),
                          let code = fields["code"]?.stringValue else { return nil }
                    return (kind, ItemCode(code))
                })
            case .purchaseRevoked, .refundDue, .transactionFinished: purchase("transactionId")
            case .subscriptionStatus: purchase("originalTransactionId")
            default: nil
            }
            guard let concerns else { return .failure(EventCodec.Invalid(reason: "notForwarded", detail: "\(type.ceType) is not an event webhooks forward")) }
            return .success(concerns)
        }
        switch decoded {
        case .failure(let invalid): return .failure(invalid)
        case .success(let concerns):
            guard let scope else { return .success(true) }
            switch concerns {
            case .items(let items):
                return .success(items.contains { kind, code in (kind == .currency ? scope.currencies : scope.entitlements).contains(code) })
            case .app(let app): return .success(scope.apps.contains(app ?? scope.primary))
            case .purchase(let key):
                guard let record = try await scope.purchases.purchase(key) else { return .success(false) }
                return .success(scope.apps.contains(record.app ?? scope.primary))
            }
        }
    }

    /// What an event is about, for an endpoint's apps.
    enum Concerns {
        /// A purchase of this app (nil: the primary one).
        case app(AppID?)
        /// This purchase, whose app the store knows.
        case purchase(PurchaseKey)
        /// A user's items (an adjustment), each a currency or an entitlement some app's products give.
        case items([(GrantItem.Kind, ItemCode)])
    }

    /// The store's errors a retry can fix are transient too.
    public func isTransient(_ error: any Error) -> Bool {
        error is TransientError || (error as? KafkaError)?.isRetriable == true || scope?.purchases.isTransient(error) == true
    }

    /// The POST of `message` (a valid event): its value as the body, its CloudEvents attributes as `ce-*` headers, signed at `sentAt`.
    func request(for message: KafkaMessage, sentAt: Date) -> HTTPClient.Request {
        let body = message.value ?? Data()
        // The events are JSON (the codec checked the body against its schema): nothing of the message's own headers but the
        // attributes, each once (the first, as the codec reads it), reaches the request's head.
        var headers: [(name: String, value: String)] = [("Content-Type", "application/json"), ("User-Agent", "iap-webhooks")]
        var sent: Set<String> = []
        for header in message.headers where CloudEventsHTTP.attributes.contains(header.key) && sent.insert(header.key).inserted {
            guard let value = header.value else { continue }
            headers.append(("ce-" + header.key.dropFirst(3), CloudEventsHTTP.headerValue(value)))
        }
        for (name, value) in RequestSignature.headers(secret: endpoint.secret, method: "POST", path: signedPath, query: signedQuery, body: body, now: sentAt)
            .sorted(by: { $0.key < $1.key }) {
            headers.append((name, value))
        }
        return HTTPClient.Request(method: "POST", url: endpoint.url.absoluteString, headers: headers, body: Array(body))
    }
}

/// What became of an event an endpoint takes.
public enum WebhookOutcome: String, Sendable, CaseIterable {
    /// The endpoint answered 2xx.
    case delivered
    /// Another app's (an endpoint of some apps): not sent.
    case skipped
    /// No answer, or one worth trying again: retried, then parked.
    case failed
    /// The endpoint refused the event itself: dead-lettered.
    case refused
    /// Not a valid event: dead-lettered, never sent.
    case invalid
}

/// How an endpoint's answer is taken.
enum WebhookAnswer: Equatable {
    case delivered, retry, refused

    init(status: Int) {
        switch status {
        case 200...299: self = .delivered
        // The receiver says the event itself is wrong: sending it again cannot change that.
        case 400, 413, 415, 422: self = .refused
        // 408, 429, 5xx, and what a fix on the receiver's side changes: a redirect (the endpoint moved), 401/403 (the
        // secret), 404 (the path). Parked, not lost, while someone fixes it.
        default: self = .retry
        }
    }
}

/// The HTTP binding of CloudEvents.
enum CloudEventsHTTP {
    /// The Kafka headers of the attributes the pipeline's events carry, sent as `ce-<name>`: these alone, so that no
    /// header name a producer made up reaches the request.
    static let attributes: Set<String> = ["ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "ce_dataschema", "ce_subject"]

    /// An attribute's value as a header carries it: printable ASCII but space, `"` and `%` as is, every other byte
    /// percent-encoded (the binding's rule; no CR or LF can reach the request's head).
    static func headerValue(_ value: Data) -> String {
        let plain = { (byte: UInt8) in (0x21...0x7E).contains(byte) && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "%") }
        // The pipeline's own attributes (ids, times, sources) need no encoding: taken whole.
        if value.withUnsafeBytes({ $0.allSatisfy(plain) }) { return String(decoding: value, as: UTF8.self) }
        var text = ""
        text.reserveCapacity(value.count)
        for byte in value {
            if plain(byte) {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                text += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0xF, radix: 16, uppercase: true)
            }
        }
        return text
    }
}

import Foundation
import HTTPServer
import JSON
import Synchronization

/// The Stripe API as tests play it, over real HTTP, as Stripe documents it:
/// - Every request needs `Authorization: Bearer <the secret key>`; else 401 with Stripe's error object
///   (`{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: …"}}`).
/// - `GET /v1/checkout/sessions/{id}` answers a session (404 `resource_missing` for one it does not know); `expand[]`
///   `line_items` embeds its first `embeddedLineItems` line items as a list (`has_more`), `payment_intent` and
///   `subscription` the objects instead of their ids.
/// - `GET /v1/checkout/sessions/{id}/line_items` lists them, `limit` (1 to 100, default 10) a page after `starting_after`.
/// - `GET /v1/events` lists the events of the last 30 days, newest first, filtered by `types[]`, `created[gte]`,
///   `created[lt]`, `limit` a page after `starting_after`, `has_more` when older ones follow.
/// - `POST /v1/refunds` (form-encoded `payment_intent`, optional `amount`) refunds a charge in whole or in part and records
///   the `charge.refunded` event.
/// - A `POST` with an `Idempotency-Key` already used answers what the first was answered when its path and body are the
///   same, else 400 `idempotency_error`.
/// - Failures (any status, with `Retry-After`) are injected for the next requests on demand; every request is recorded.
public final class StripeAPIStandIn: Sendable {
    /// One line item of a session.
    public struct LineItem: Sendable {
        public var id: String
        public var priceId: String
        public var productId: String
        public var quantity: Int
        /// In the currency's minor unit.
        public var unitAmount: Int64
        public var currency: String
        /// A subscription's price (`recurring` set).
        public var recurring: Bool

        public init(id: String = StripeAPIStandIn.newID("li"), priceId: String, productId: String, quantity: Int = 1, unitAmount: Int64 = 499,
                    currency: String = "usd", recurring: Bool = false) {
            self.id = id
            self.priceId = priceId
            self.productId = productId
            self.quantity = quantity
            self.unitAmount = unitAmount
            self.currency = currency
            self.recurring = recurring
        }
    }

    /// One Checkout Session Stripe knows.
    public struct Session: Sendable {
        public var id: String
        /// `open`, `complete`, `expired`.
        public var status: String
        /// `paid`, `unpaid`, `no_payment_required`.
        public var paymentStatus: String
        /// `payment`, `subscription`, `setup`.
        public var mode: String
        public var clientReferenceId: String?
        public var metadata: [String: String]
        public var lineItems: [LineItem]
        /// `payment` mode's; nil in `subscription` mode.
        public var paymentIntentId: String?
        /// `succeeded`, `processing`, `requires_payment_method`, ….
        public var paymentIntentStatus: String
        /// `subscription` mode's.
        public var subscriptionId: String?
        public var subscriptionStatus: String
        public var currentPeriodEnd: Date?
        public var created: Date
        public var livemode: Bool

        public init(id: String = StripeAPIStandIn.newID("cs_test"), status: String = "complete", paymentStatus: String = "paid", mode: String = "payment",
                    clientReferenceId: String?, metadata: [String: String] = [:], lineItems: [LineItem], paymentIntentId: String? = nil,
                    paymentIntentStatus: String = "succeeded", subscriptionId: String? = nil, subscriptionStatus: String = "active",
                    currentPeriodEnd: Date? = nil, created: Date = Date(), livemode: Bool = false) {
            self.id = id
            self.status = status
            self.paymentStatus = paymentStatus
            self.mode = mode
            self.clientReferenceId = clientReferenceId
            self.metadata = metadata
            self.lineItems = lineItems
            self.paymentIntentId = paymentIntentId ?? (mode == "payment" ? StripeAPIStandIn.newID("pi") : nil)
            self.paymentIntentStatus = paymentIntentStatus
            self.subscriptionId = subscriptionId ?? (mode == "subscription" ? StripeAPIStandIn.newID("sub") : nil)
            self.subscriptionStatus = subscriptionStatus
            self.currentPeriodEnd = currentPeriodEnd
            self.created = created
            self.livemode = livemode
        }

        /// What the session cost: the sum of its lines.
        public var amountTotal: Int64 { lineItems.reduce(0) { $0 + $1.unitAmount * Int64($1.quantity) } }
    }

    /// A charge of a paid session's payment intent.
    public struct Charge: Sendable {
        public var id: String
        public var paymentIntentId: String
        public var amount: Int64
        public var amountRefunded: Int64
        public var currency: String
    }

    /// A fault injected: answered instead of the API's answer.
    struct Fault {
        var status: Int
        var retryAfter: Int?
        /// Requests left to answer with it; nil: every one until cleared.
        var remaining: Int?
    }

    /// Everything the handler reads and changes.
    struct Books {
        var sessions: [String: Session] = [:]
        var charges: [String: Charge] = [:]
        /// Events in the order they were created (oldest first).
        var events: [[String: JSONValue]] = []
        /// Idempotency key → the request's method, path and body, and the answer.
        var idempotent: [String: (request: String, response: HTTPResponse)] = [:]
        var requests: [String] = []
        var fault: Fault?
        var embeddedLineItems = 10
    }

    /// The books, shared with the handler.
    final class Registry: Sendable {
        let books = Mutex(Books())
    }

    public let server: HTTPServer
    /// The account's secret key: the one key the stand-in takes.
    public let secretKey: String
    let registry = Registry()

    public var baseURL: URL { URL(string: "http://127.0.0.1:\(server.port)")! }

    /// A stand-in knowing `sessions` (each paid one's payment intent with a charge of its amount), taking `secretKey` only.
    public init(secretKey: String = "sk_test_" + StripeAPIStandIn.newID("standin"), sessions: [Session] = [],
                configuration: HTTPServer.Configuration = .init()) throws {
        self.secretKey = secretKey
        let registry = registry
        server = try HTTPServer(configuration: configuration, synchronousHandler: { request in
            Self.handle(request, registry: registry, secretKey: secretKey)
        })
        for session in sessions { set(session) }
    }

    /// A new id of Stripe's shape: `prefix_` and 24 letters and digits.
    public static func newID(_ prefix: String) -> String {
        prefix + "_" + String(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(24))
    }

    /// Adds or changes a session (a delayed payment settles, a checkout completes); a paid `payment` session's payment
    /// intent gets a charge of its amount when it has none.
    public func set(_ session: Session) {
        registry.books.withLock { books in
            books.sessions[session.id] = session
            if let intent = session.paymentIntentId, session.paymentStatus == "paid", !books.charges.values.contains(where: { $0.paymentIntentId == intent }) {
                let charge = Charge(id: Self.newID("ch"), paymentIntentId: intent, amount: session.amountTotal, amountRefunded: 0,
                                    currency: session.lineItems.first?.currency ?? "usd")
                books.charges[charge.id] = charge
            }
        }
    }

    public func session(_ id: String) -> Session? { registry.books.withLock { $0.sessions[id] } }
    /// The charge of a payment intent.
    public func charge(paymentIntent: String) -> Charge? { registry.books.withLock { $0.charges.values.first { $0.paymentIntentId == paymentIntent } } }

    /// How many line items a session embeds when `line_items` is expanded (Stripe: the first handful).
    public func setEmbeddedLineItems(_ count: Int) { registry.books.withLock { $0.embeddedLineItems = max(0, count) } }

    /// Every request, `METHOD path[?query]` (the query as sent), in order.
    public var requests: [String] { registry.books.withLock { $0.requests } }

    /// Answers the next `times` requests (nil: every one until `fail(nil)`) with `status` and Stripe's error object, with
    /// `Retry-After: retryAfter` (seconds) when given.
    public func fail(_ status: Int?, retryAfter: Int? = nil, times: Int? = nil) {
        registry.books.withLock { $0.fault = status.map { Fault(status: $0, retryAfter: retryAfter, remaining: times) } }
    }

    /// Records an event of `type` about `object` (its JSON as Stripe writes it), created at `created`: listed by
    /// `GET /v1/events` from now on. Its id.
    @discardableResult
    public func emit(type: String, object: [String: JSONValue], created: Date = Date(), livemode: Bool = false) -> String {
        let event = Self.event(type: type, object: object, created: created, livemode: livemode)
        registry.books.withLock { $0.events.append(event) }
        return event["id"]?.stringValue ?? ""
    }

    /// A new event of `type` about `object`, as Stripe writes events.
    static func event(type: String, object: [String: JSONValue], created: Date, livemode: Bool) -> [String: JSONValue] {
        [
            "id": .string(newID("evt")), "object": .string("event"), "api_version": .string("2025-03-31.basil"), "created": .integer(Int64(created.timeIntervalSince1970)),
            "livemode": .bool(livemode), "pending_webhooks": .integer(1), "type": .string(type), "data": .object(["object": .object(object)]),
            "request": .object(["id": .null, "idempotency_key": .null]),
        ]
    }

    /// The ids of the events recorded (emitted, or of refunds made), oldest first.
    public var eventIds: [String] { registry.books.withLock { $0.events.compactMap { $0["id"]?.stringValue } } }

    /// The event `id` as a webhook delivers it: its body.
    public func eventBody(_ id: String) -> Data? {
        registry.books.withLock { books in books.events.first { $0["id"]?.stringValue == id }.map { Data(JSONValue.object($0).serializedText.utf8) } }
    }

    /// The session `id` as a `checkout.session.*` event carries it (nothing expanded); nil for one not known.
    public func sessionObject(_ id: String) -> [String: JSONValue]? {
        registry.books.withLock { books in books.sessions[id].map { Self.sessionObject($0, expand: []) } }
    }
}

import Foundation
import JSON
import PurchaseDomain

/// One line item of a Checkout Session: a price bought at a quantity.
public struct StripeLineItem: Sendable, Hashable {
    /// `li_…`: unique within its session.
    public var id: String
    /// The price's id (`price_…`); nil for an item without a price (Stripe documents none for Checkout).
    public var priceId: String?
    /// The price's product (`prod_…`).
    public var productId: String?
    /// Nil when Stripe leaves it out (then one unit).
    public var quantity: Int64?
    /// What the line cost, discounts and tax included, in the currency's minor unit.
    public var amountTotal: Int64?
    /// Lower-case, as Stripe writes it.
    public var currency: String?
    /// Whether the price is recurring (a subscription's).
    public var isRecurring: Bool
    public var raw: [String: JSONValue]

    /// The item a line item object describes; nil without an id.
    init?(_ fields: [String: JSONValue]) {
        let json = JSONFields(object: fields)
        guard let id = json.string("id"), !id.isEmpty else { return nil }
        self.id = id
        let price = fields["price"]?.objectValue
        priceId = price?["id"]?.stringValue
        productId = StripeValues.id(price?["product"])
        quantity = json.int("quantity")
        amountTotal = json.int("amount_total")
        currency = json.string("currency")
        isRecurring = price?["recurring"]?.objectValue != nil
        raw = fields
    }
}

/// A Checkout Session as the API reports it (`GET /v1/checkout/sessions/{id}` with its line items, its payment intent and
/// subscription expanded): what a web purchase is verified by.
public struct StripeCheckoutSession: Sendable, Hashable {
    /// `cs_…`.
    public var id: String
    /// `open`, `complete` or `expired`.
    public var status: String?
    /// `paid`, `unpaid` (a payment method that settles later, or not paid yet) or `no_payment_required`.
    public var paymentStatus: String?
    /// `payment`, `subscription` or `setup`.
    public var mode: String?
    /// What the operator's site set when it created the session: the pipeline's user id.
    public var clientReferenceId: String?
    /// The session's metadata (string values only; others left out).
    public var metadata: [String: String]
    public var paymentIntentId: String?
    /// The payment intent's status when it was expanded (`succeeded`, `processing`, `requires_payment_method`, …).
    public var paymentIntentStatus: String?
    public var subscriptionId: String?
    /// The subscription's status when it was expanded (`active`, `trialing`, `incomplete`, …).
    public var subscriptionStatus: String?
    /// The end of the subscription's current period, when it was expanded: its own `current_period_end` before API
    /// version 2025-03-31, its first item's after.
    public var currentPeriodEnd: Date?
    public var customerId: String?
    public var amountTotal: Int64?
    public var currency: String?
    public var created: Date?
    public var livemode: Bool
    /// Every line item, all pages read.
    public var lineItems: [StripeLineItem]
    /// The session's fields without its line items, expanded objects as their ids.
    public var raw: [String: JSONValue]

    /// The session an answer describes (its own `line_items` as the first of them); nil without an id, or with a line
    /// item without one.
    init?(_ fields: [String: JSONValue]) {
        let json = JSONFields(object: fields)
        guard let id = json.string("id"), !id.isEmpty else { return nil }
        self.id = id
        status = json.string("status")
        paymentStatus = json.string("payment_status")
        mode = json.string("mode")
        clientReferenceId = json.string("client_reference_id")
        metadata = (fields["metadata"]?.objectValue ?? [:]).compactMapValues(\.stringValue)
        paymentIntentId = StripeValues.id(fields["payment_intent"])
        paymentIntentStatus = fields["payment_intent"]?.objectValue?["status"]?.stringValue
        subscriptionId = StripeValues.id(fields["subscription"])
        let subscription = fields["subscription"]?.objectValue.map(JSONFields.init)
        subscriptionStatus = subscription?.string("status")
        let firstItem = subscription?.object("items")?.object["data"]?.arrayValue?.first?.objectValue.map(JSONFields.init)
        currentPeriodEnd = (subscription?.int("current_period_end") ?? firstItem?.int("current_period_end")).flatMap(StripeValues.date(seconds:))
        customerId = StripeValues.id(fields["customer"])
        amountTotal = json.int("amount_total")
        currency = json.string("currency")
        created = json.int("created").flatMap(StripeValues.date(seconds:))
        livemode = json.bool("livemode") ?? false
        let listed = fields["line_items"]?.objectValue?["data"]?.arrayValue ?? []
        lineItems = listed.compactMap { $0.objectValue.flatMap(StripeLineItem.init) }
        guard lineItems.count == listed.count else { return nil }
        var raw = fields
        raw["line_items"] = nil
        for key in ["payment_intent", "subscription", "customer"] where raw[key]?.objectValue != nil {
            raw[key] = StripeValues.id(raw[key]).map(JSONValue.string) ?? .null
        }
        self.raw = raw
    }

    /// Whether Stripe says there are more line items than the answer held.
    static func hasMoreLineItems(_ fields: [String: JSONValue]) -> Bool { fields["line_items"]?.objectValue?["has_more"]?.boolValue == true }
}

extension StripeAPIClient {
    /// Line items read per page after the session's own (Stripe's most).
    static let lineItemPageSize = 100
    /// Pages of line items read at most (10,000 items): a list that never ends is an API fault, not a purchase.
    static let maxLineItemPages = 100

    /// `GET /v1/checkout/sessions/{id}?expand[]=line_items&expand[]=payment_intent&expand[]=subscription`, and when its
    /// line items have more, `GET /v1/checkout/sessions/{id}/line_items?limit=100&starting_after={last}` until they
    /// have no more.
    public func checkoutSession(_ id: String) async -> Result<StripeCheckoutSession, Failure> {
        guard Self.isStripeID(id) else { return .failure(.refused(status: 0, detail: "not a Stripe id: a checkout session id is letters, digits and '_'")) }
        let fields: [String: JSONValue]
        switch await get("checkout/sessions/" + id, query: [("expand[]", "line_items"), ("expand[]", "payment_intent"), ("expand[]", "subscription")]) {
        case .success(let answered): fields = answered
        case .failure(let failure): return .failure(failure)
        }
        guard var session = StripeCheckoutSession(fields) else {
            return .failure(.unavailable("Stripe API: an answer that is not a Checkout Session with its line items"))
        }
        var hasMore = StripeCheckoutSession.hasMoreLineItems(fields)
        var pages = 0
        while hasMore {
            pages += 1
            guard pages <= Self.maxLineItemPages, let last = session.lineItems.last?.id, Self.isStripeID(last) else {
                return .failure(.unavailable("Stripe API: line items that do not end, or a page of them that names no last item"))
            }
            let page: [String: JSONValue]
            switch await get("checkout/sessions/" + id + "/line_items", query: [("limit", String(Self.lineItemPageSize)), ("starting_after", last)]) {
            case .success(let answered): page = answered
            case .failure(let failure): return .failure(failure)
            }
            let listed = page["data"]?.arrayValue ?? []
            let items = listed.compactMap { $0.objectValue.flatMap(StripeLineItem.init) }
            guard items.count == listed.count else { return .failure(.unavailable("Stripe API: a line item without its id")) }
            session.lineItems += items
            hasMore = page["has_more"]?.boolValue == true
            if hasMore && items.isEmpty { return .failure(.unavailable("Stripe API: an empty page of line items that says it has more")) }
        }
        return .success(session)
    }
}

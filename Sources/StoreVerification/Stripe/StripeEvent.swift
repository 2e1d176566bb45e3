import Foundation
import JSON
import PurchaseDomain

/// A Stripe event (a webhook delivery's body, or one of `GET /v1/events`): which object changed how, and the ids that find
/// the purchase it concerns. A hint, as a store's notification is: what it says of a purchase is read again from the API
/// where it decides anything.
///
/// Any well-formed event parses; `kind` is nil for the types the pipeline does not act on, which are ignored, not refused.
public struct StripeEvent: Sendable, Hashable {
    /// The event types the pipeline acts on, by Stripe's names.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// A session was paid (or paid with a method that settles later: its `payment_status` says).
        case checkoutSessionCompleted = "checkout.session.completed"
        /// A session's delayed payment settled.
        case checkoutSessionAsyncPaymentSucceeded = "checkout.session.async_payment_succeeded"
        /// A session's delayed payment failed.
        case checkoutSessionAsyncPaymentFailed = "checkout.session.async_payment_failed"
        /// A charge was refunded, in whole or in part (`amountRefunded` of `amount`).
        case chargeRefunded = "charge.refunded"
        /// A customer disputed a charge.
        case chargeDisputeCreated = "charge.dispute.created"
        /// A dispute ended: `won` or `lost` (`disputeLost`).
        case chargeDisputeClosed = "charge.dispute.closed"
        /// A subscription changed (status, period, cancellation at the period's end, …).
        case customerSubscriptionUpdated = "customer.subscription.updated"
        /// A subscription ended.
        case customerSubscriptionDeleted = "customer.subscription.deleted"
        /// An invoice was paid: a subscription's first period or a renewal.
        case invoicePaid = "invoice.paid"
    }

    /// `evt_…`.
    public var id: NotificationID
    /// The type as Stripe named it (also for a type `kind` does not know).
    public var type: String
    /// Nil: a type the pipeline ignores.
    public var kind: Kind?
    public var created: Date?
    public var livemode: Bool
    /// The changed object's id (`cs_…`, `ch_…`, `dp_…`, `sub_…`, `in_…`).
    public var objectId: String?
    public var checkoutSessionId: String?
    public var paymentIntentId: String?
    public var chargeId: String?
    public var subscriptionId: String?
    public var invoiceId: String?
    public var customerId: String?
    /// The session's `client_reference_id` (a session's events).
    public var clientReferenceId: String?
    /// The object's amount in the currency's minor unit: a session's `amount_total`, a charge's or a dispute's `amount`,
    /// an invoice's `amount_paid`.
    public var amount: Int64?
    /// A charge's `amount_refunded`.
    public var amountRefunded: Int64?
    /// Lower-case, as Stripe writes it.
    public var currency: String?
    /// The share of the charge refunded in `RefundShare`'s thousandths of a percent (`charge.refunded`): the whole when
    /// all of it was; nil for other events.
    public var refundedShare: Int64?
    /// The object's `status` (a session's, a dispute's, a subscription's, an invoice's).
    public var status: String?
    /// A session's `payment_status`.
    public var paymentStatus: String?
    /// A closed dispute's outcome: true `lost`, false `won` (or an inquiry closed without a chargeback,
    /// `warning_closed`); nil while it is open and for other events.
    public var disputeLost: Bool?
    /// The changed object (`data.object`).
    public var object: [String: JSONValue]
    /// The whole event.
    public var raw: [String: JSONValue]

    /// The event in a webhook's body; nil when it is not JSON or not an event (no id, type or object).
    public init?(json body: some Collection<UInt8>) {
        guard let fields = JSONValue.parse(body)?.objectValue else { return nil }
        self.init(fields)
    }

    /// The event `fields` describe; nil when they are not an event (no id, type or object).
    public init?(_ fields: [String: JSONValue]) {
        let json = JSONFields(object: fields)
        guard let id = json.string("id"), !id.isEmpty, let type = json.string("type"), !type.isEmpty,
              let object = json.object("data")?.object["object"]?.objectValue else { return nil }
        self.id = NotificationID(id)
        self.type = type
        kind = Kind(rawValue: type)
        created = json.int("created").flatMap(StripeValues.date(seconds:))
        livemode = json.bool("livemode") ?? false
        self.object = object
        raw = fields
        let data = JSONFields(object: object)
        objectId = data.string("id")
        currency = data.string("currency")
        status = data.string("status")
        customerId = StripeValues.id(object["customer"])
        paymentIntentId = StripeValues.id(object["payment_intent"])
        switch kind {
        case .checkoutSessionCompleted?, .checkoutSessionAsyncPaymentSucceeded?, .checkoutSessionAsyncPaymentFailed?:
            checkoutSessionId = objectId
            subscriptionId = StripeValues.id(object["subscription"])
            invoiceId = StripeValues.id(object["invoice"])
            clientReferenceId = data.string("client_reference_id")
            paymentStatus = data.string("payment_status")
            amount = data.int("amount_total")
        case .chargeRefunded?:
            chargeId = objectId
            invoiceId = StripeValues.id(object["invoice"])
            amount = data.int("amount")
            amountRefunded = data.int("amount_refunded")
            if let amount, let refunded = amountRefunded {
                refundedShare = data.bool("refunded") == true ? RefundShare.whole : StripeValues.refundedShare(refunded: refunded, of: amount)
            }
        case .chargeDisputeCreated?, .chargeDisputeClosed?:
            chargeId = StripeValues.id(object["charge"])
            amount = data.int("amount")
            disputeLost = switch status {
            case "lost"?: true
            case "won"?, "warning_closed"?: false
            default: nil
            }
        case .customerSubscriptionUpdated?, .customerSubscriptionDeleted?:
            subscriptionId = objectId
            invoiceId = StripeValues.id(object["latest_invoice"])
        case .invoicePaid?:
            invoiceId = objectId
            chargeId = StripeValues.id(object["charge"])
            amount = data.int("amount_paid")
            // Before 2025-03-31 the invoice names its subscription; after, its parent's subscription details do.
            subscriptionId = StripeValues.id(object["subscription"])
                ?? StripeValues.id(data.object("parent")?.object("subscription_details")?.object["subscription"])
        case nil:
            break
        }
    }

    /// A subscription's current period end (`customer.subscription.*`): its own before API version 2025-03-31, its first
    /// item's after; an invoice's first line's period end (`invoice.paid`).
    public var periodEnd: Date? { period("end") }

    /// A subscription's current period's or an invoice's first line's period's `bound` (`start` or `end`), as
    /// `periodEnd` and `periodStart` read it.
    func period(_ bound: String) -> Date? {
        let data = JSONFields(object: object)
        let seconds: Int64? = switch kind {
        case .customerSubscriptionUpdated?, .customerSubscriptionDeleted?:
            data.int("current_period_" + bound)
                ?? data.object("items")?.object["data"]?.arrayValue?.first?.objectValue.flatMap { JSONFields(object: $0).int("current_period_" + bound) }
        case .invoicePaid?:
            firstInvoiceLine.flatMap { JSONFields(object: $0).object("period")?.int(bound) }
        default: nil
        }
        return seconds.flatMap(StripeValues.date(seconds:))
    }

    /// An invoice's first line (`invoice.paid`).
    var firstInvoiceLine: [String: JSONValue]? { object["lines"]?.objectValue?["data"]?.arrayValue?.first?.objectValue }
}

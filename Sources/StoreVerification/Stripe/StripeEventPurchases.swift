import Foundation
import JSON
import PurchaseDomain

extension StripeEvent {
    /// A subscription's start of its current period (`customer.subscription.*`): its own before API version 2025-03-31,
    /// its first item's after; an invoice's first line's period start (`invoice.paid`).
    public var periodStart: Date? { period("start") }

    /// An invoice's `billing_reason` (`invoice.paid`): `subscription_cycle` for a renewal, `subscription_create` for the
    /// first period (which its Checkout Session grants), `subscription_update` for a change of plan, …
    public var billingReason: String? { kind == .invoicePaid ? object["billing_reason"]?.stringValue : nil }

    /// The price an invoice's first line bills (`invoice.paid`): the line's `price` before API version 2025-03-31, its
    /// `pricing.price_details.price` after.
    public var invoicePriceId: String? {
        guard let line = firstInvoiceLine else { return nil }
        return StripeValues.id(line["price"])
            ?? StripeValues.id(line["pricing"]?.objectValue?["price_details"]?.objectValue?["price"])
    }

    /// The quantity of an invoice's first line (`invoice.paid`).
    public var invoiceQuantity: Int64? { firstInvoiceLine.flatMap { JSONFields(object: $0).int("quantity") } }
}

extension VerifiedPurchase {
    /// A subscription's renewal an `invoice.paid` event (`billing_reason` `subscription_cycle`) tells of, as a purchase of
    /// `store`: the invoice is the transaction, the subscription its original; the period it paid for, what it cost.
    /// `productId`: what the subscription sells (its invoice line's price, or what its earlier periods were recorded as).
    /// Its `raw` is the invoice (with `invoice`, its id, so that a refund of its charge finds it when it names no payment
    /// intent). Nil for an event that is not a paid invoice of a subscription.
    public init?(renewal event: StripeEvent, productId: ProductID, store: Store) {
        guard event.kind == .invoicePaid, let invoice = event.invoiceId, let subscription = event.subscriptionId else { return nil }
        self.store = store
        transactionId = TransactionID(invoice)
        originalTransactionId = TransactionID(subscription)
        self.productId = productId
        productType = nil
        quantity = Int(clamping: event.invoiceQuantity ?? 1)
        purchaseDate = event.periodStart ?? event.created
        environment = event.livemode ? "Production" : "Test"
        currency = event.currency.flatMap(StripeValues.currencyCode)
        if let currency, let amount = event.amount { price = StripeValues.milliunits(amount, currency: currency) }
        expiresDate = event.periodEnd
        var raw = event.object
        raw["invoice"] = .string(invoice)
        self.raw = raw
    }

    /// A recorded purchase as it was verified, with the period it pays for now ending at `expiresDate`: a subscription
    /// whose period end Stripe moved (`customer.subscription.updated`), to be recorded again so that its grant lasts until
    /// then (as a transaction the App Store signs again with a later expiry).
    public init(period record: PurchaseRecord, endingAt expiresDate: Date) {
        store = record.key.store
        transactionId = record.key.transactionId
        originalTransactionId = record.originalTransactionId
        productId = record.productId
        productType = nil
        quantity = record.quantity
        purchaseDate = record.purchaseTime
        environment = record.environment
        appAccountToken = record.appAccountToken
        self.expiresDate = expiresDate
        raw = record.purchaseToken.map { ["payment_intent": .string($0.rawValue)] } ?? [:]
    }

    /// What a Stripe purchase is found by when a refund or a dispute names its payment: the payment intent its Checkout
    /// Session (or its invoice) was paid with, else its invoice. Nil for other stores' purchases.
    public var stripePaymentReference: PurchaseToken? {
        switch store {
        case .stripe: break
        case .appstore, .appcoins, .googleplay: return nil
        }
        return (StripeValues.id(raw["payment_intent"]) ?? StripeValues.id(raw["invoice"])).map { PurchaseToken($0) }
    }
}

extension StripeEvent {
    /// The Stripe object the purchase an event concerns is known by, which keeps what is told of one purchase in order
    /// (the message key of its `store.notification`): its subscription, else its payment intent, else the changed
    /// object. At most 255 characters (a Stripe id's longest).
    public var purchaseSubject: String? {
        (subscriptionId ?? paymentIntentId ?? objectId).map { String(String.UnicodeScalarView($0.unicodeScalars.prefix(255))) }
    }
}

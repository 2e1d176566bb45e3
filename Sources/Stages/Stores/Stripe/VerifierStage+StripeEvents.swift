import Foundation
import PurchaseDomain
import PurchaseEvents
import StoreVerification
import WorkerRuntime

/// `store.notification` of Stripe: an event a webhook delivered (its signature checked by the ingest) or reconciliation
/// read back from `GET /v1/events`, both under Stripe's event id. Each is recorded as handled (so that a reconciliation
/// pass publishes it no more) and carried out through the paths the other stores' notifications take:
///
/// - a Checkout Session paid (`checkout.session.completed`, `…async_payment_succeeded`): read back from Stripe's API
///   and recorded for its `client_reference_id` user like a submission by the store, granted once whether or not the
///   app's backend submitted it too; one whose delayed payment failed grants nothing (a submission of it waiting for
///   the payment is answered by its recheck);
/// - a charge refunded (`charge.refunded`): the purchases of its payment intent revoked, a partial refund taking back its
///   share (`RefundShare`); a dispute opened (`charge.dispute.created`) revokes them as a refund does, one closed won
///   reverses that (as the App Store's REFUND_REVERSED), one lost changes nothing more;
/// - a subscription: its period's end moved (`customer.subscription.updated`, the period the pipeline recorded), its
///   end (`customer.subscription.deleted`, as the App Store's EXPIRED), a renewal paid (`invoice.paid` of
///   `subscription_cycle`: a new period for the subscription's owner, once).
///
/// Events of one purchase share a partition (keyed by its subscription or payment intent), so they are handled in order;
/// a refund and its reversal are ordered by when Stripe created their events (`decidedAt`) in any case.
extension VerifierStage {
    func handleStripe(_ received: StoreNotificationReceived) async throws -> StageResult {
        guard let stripe = stores.stripe else { return .deadLetter(reason: "notificationRejected", detail: StoreVerifiers.notConfigured(.stripe).detail) }
        guard let text = received.stripeEvent, let event = StripeEvent(json: Array(text.utf8)), StripeAPIClient.isStripeID(event.id.rawValue) else {
            return .deadLetter(reason: "notificationRejected", detail: "not a Stripe event with its id, type and object")
        }
        guard let kind = event.kind else { return .publish([]) } // the ingest and reconciliation publish only the handled types
        context.logger.info("Stripe event", ["type": event.type, "eventId": event.id, "object": event.objectId ?? ""])
        switch kind {
        case .checkoutSessionCompleted, .checkoutSessionAsyncPaymentSucceeded:
            return try await stripeCheckoutPaid(event, stripe: stripe, received: received)
        case .checkoutSessionAsyncPaymentFailed:
            try await seen(event)
            context.logger.info("Stripe: a delayed payment failed; nothing granted", ["session": event.checkoutSessionId ?? ""])
            return .publish([])
        case .chargeRefunded:
            try await seen(event)
            return try await stripeRevocations(event, reason: .REFUND, share: event.refundedShare)
        case .chargeDisputeCreated:
            try await seen(event)
            return try await stripeRevocations(event, reason: .REFUND, share: nil) // the disputed funds are withdrawn
        case .chargeDisputeClosed:
            try await seen(event)
            guard event.disputeLost == false else { return .publish([]) } // lost: revoked when it was opened
            return try await stripeRevocations(event, reason: .REFUND_REVERSED, share: nil)
        case .customerSubscriptionUpdated:
            try await seen(event)
            return try await stripePeriodMoved(event, received: received)
        case .customerSubscriptionDeleted:
            try await seen(event)
            return try await stripeSubscriptionEnded(event)
        case .invoicePaid:
            try await seen(event)
            return try await stripeRenewal(event, received: received)
        }
    }

    /// Recorded as handled, in the batch's transaction with what it leads to (or just before it, for a message handled
    /// alone): a reconciliation pass then publishes it only if it never got here.
    private func seen(_ event: StripeEvent) async throws {
        try await store.recordNotificationSeen(event.id, type: event.type, at: context.now())
    }

    /// A paid Checkout Session: verified through the API (what the event says is a hint) for the user it was made for,
    /// and recorded as a charge the store announced for them.
    private func stripeCheckoutPaid(_ event: StripeEvent, stripe: StripeVerifier, received: StoreNotificationReceived) async throws -> StageResult {
        let metadata = (event.object["metadata"]?.objectValue ?? [:]).compactMapValues(\.stringValue)
        guard let session = event.checkoutSessionId, let user = stripe.namedUser(clientReferenceId: event.clientReferenceId, metadata: metadata) else {
            try await seen(event)
            context.logger.warning("Stripe: a Checkout Session that names no user; left to the app's submission", ["session": event.checkoutSessionId ?? ""])
            return .publish([])
        }
        let purchases: [VerifiedPurchase]
        switch await stripe.verifyCheckoutSession(session, user: user) {
        case .success(let checkout): purchases = checkout.purchases(store: .stripe)
        case .failure(let rejection) where rejection.reason == .purchasePending || !rejection.isRetryable:
            // Not paid yet (its async_payment_succeeded follows), not of this deployment's apps, not complete: nothing to grant.
            try await seen(event)
            context.logger.info("Stripe: nothing to record for the session", ["session": session, "reason": rejection.reason.rawValue])
            return .publish([])
        case .failure(let rejection):
            throw TransientError("\(rejection)") // asked again; not recorded as handled
        }
        try await seen(event)
        let submission = PurchaseSubmitted(store: .stripe, kind: .stripeCheckout, stripe: .init(checkoutSessionId: session), userId: user,
                                           submittedAt: received.receivedAt, source: .server, submissionId: Self.announcedSubmissionId("stripe:\(session)"))
        return .publish(try await record(purchases, for: submission, byTheStore: true))
    }

    /// `reason` for each purchase of the payment the event names (its payment intent, else its invoice): what a refund, a
    /// dispute or a dispute's reversal means, carried out by the granter as the App Store's are.
    private func stripeRevocations(_ event: StripeEvent, reason: PurchaseRevokedEvent.Reason, share: Int64?) async throws -> StageResult {
        var keys: [PurchaseKey] = []
        // Before API version 2025-03-31 a charge names its invoice too: a subscription's first period was recorded by it.
        let invoice = event.object["invoice"]?.stringValue
        for reference in [event.paymentIntentId, invoice].compactMap({ $0 }) where keys.isEmpty {
            keys = try await store.purchases(store: .stripe, purchaseToken: PurchaseToken(reference))
        }
        guard !keys.isEmpty else {
            context.logger.warning("Stripe: no purchase recorded for the payment", ["type": event.type, "paymentIntent": event.paymentIntentId ?? "",
                                                                                   "charge": event.chargeId ?? ""])
            return .publish([])
        }
        var events: [PurchaseRevokedEvent] = []
        for key in keys {
            let held = try await store.purchase(key)
            // A refund of whole units of one purchase takes back those units exactly: a third of three packs is one pack, which
            // the share (in steps of 1/100,000, rounded down) would make a unit short.
            let units = keys.count == 1 && reason == .REFUND ? Self.refundedUnits(event, quantity: held?.quantity ?? 1) : nil
            events.append(PurchaseRevokedEvent(
                store: .stripe, transactionId: key.transactionId, originalTransactionId: held?.originalTransactionId, userId: held?.owner,
                productId: held?.productId, reason: reason, revocationDate: reason == .REFUND ? event.created : nil,
                refundShare: reason == .REFUND ? share : nil, refundedQuantity: units, notificationUUID: event.id.rawValue, decidedAt: event.created,
                revokedAt: context.now()))
        }
        return try context.messages(events)
    }

    /// The units of a `quantity`-unit purchase a partial refund gave back, when it is a whole number of them (the amount
    /// refunded so far, `amount_refunded`, times the quantity, a multiple of the charge's amount); nil otherwise (the share
    /// then says how much), and for a full refund.
    static func refundedUnits(_ event: StripeEvent, quantity: Int) -> Int? {
        guard quantity > 1, let amount = event.amount, amount > 0, let refunded = event.amountRefunded, refunded > 0, refunded < amount else { return nil }
        let (units, overflow) = refunded.multipliedReportingOverflow(by: Int64(quantity))
        guard !overflow, units % amount == 0 else { return nil }
        return Int(units / amount)
    }

    /// The latest period the pipeline recorded of a subscription, and its owner.
    private func latestPeriod(of subscription: String) async throws -> PurchaseRecord? {
        let original = TransactionID(subscription)
        guard let owner = try await store.owner(store: .stripe, originalTransactionId: original),
              let latest = try await store.purchases(store: .stripe, originalTransactionId: original, ownedBy: owner).last else { return nil }
        return try await store.purchase(latest)
    }

    /// `customer.subscription.updated` of an active subscription: the end of the period the pipeline recorded moves to the
    /// current period's end, recorded again as verified so that the granter extends what it gave (as the App Store's
    /// RENEWAL_EXTENDED). A period that began after the recorded one ended is a renewal, granted by its `invoice.paid`.
    private func stripePeriodMoved(_ event: StripeEvent, received: StoreNotificationReceived) async throws -> StageResult {
        guard let subscription = event.subscriptionId, let end = event.periodEnd, ["active", "trialing"].contains(event.status ?? "") else {
            return .publish([])
        }
        guard let period = try await latestPeriod(of: subscription), let owner = period.owner, let recordedEnd = period.expiresDate,
              end > recordedEnd, (event.periodStart ?? recordedEnd) < recordedEnd else { return .publish([]) }
        let submission = PurchaseSubmitted(store: .stripe, kind: .stripeCheckout, userId: owner, submittedAt: received.receivedAt, source: .server,
                                           submissionId: Self.announcedSubmissionId("stripe:\(event.id)"))
        return .publish(try await record([VerifiedPurchase(period: period, endingAt: end)], for: submission, byTheStore: true))
    }

    /// `customer.subscription.deleted`: what the subscription's periods gave ends (the App Store's EXPIRED).
    private func stripeSubscriptionEnded(_ event: StripeEvent) async throws -> StageResult {
        guard let subscription = event.subscriptionId, let period = try await latestPeriod(of: subscription) else {
            context.logger.info("Stripe: a subscription ended that no recorded purchase belongs to", ["subscription": event.subscriptionId ?? ""])
            return .publish([])
        }
        return try context.messages([PurchaseRevokedEvent(
            store: .stripe, transactionId: period.key.transactionId, originalTransactionId: TransactionID(subscription), userId: period.owner,
            productId: period.productId, reason: .EXPIRED, notificationUUID: event.id.rawValue, decidedAt: event.created, revokedAt: context.now())])
    }

    /// `invoice.paid` of a renewal: the new period recorded for the subscription's owner (`recordAnnouncedCharge`), granted
    /// once however often it is told. The first period's invoice is its Checkout Session's; a change of plan's is not a
    /// new period.
    private func stripeRenewal(_ event: StripeEvent, received: StoreNotificationReceived) async throws -> StageResult {
        guard event.billingReason == "subscription_cycle", let subscription = event.subscriptionId else { return .publish([]) }
        let earlier = try await latestPeriod(of: subscription)
        guard let productId = event.invoicePriceId.map({ ProductID($0) }) ?? earlier?.productId,
              let renewal = VerifiedPurchase(renewal: event, productId: productId, store: .stripe) else {
            context.logger.warning("Stripe: a renewal that names no price, of a subscription not recorded", ["invoice": event.invoiceId ?? ""])
            return .publish([])
        }
        return try await recordAnnouncedCharge(renewal, announcedAs: event.type) { owner in
            PurchaseSubmitted(store: .stripe, kind: .stripeCheckout, userId: owner, submittedAt: received.receivedAt, source: .server,
                              submissionId: Self.announcedSubmissionId("stripe:\(renewal.transactionId)"))
        }
    }
}

import Foundation
import JSON
import PurchaseDomain
import StoreFixtures
import StoreVerification
import Testing

/// Stripe events as webhooks deliver them and `GET /v1/events` lists them (from the stand-in, over real HTTP): the typed
/// model of the types the pipeline acts on, the others ignored, and reading from a checkpoint.
@Suite struct StripeEventTests {
    static func event(_ type: String, _ object: [String: JSONValue], created: Int64 = 1_764_400_000) -> StripeEvent? {
        let fields: [String: JSONValue] = ["id": .string("evt_1"), "object": .string("event"), "type": .string(type), "created": .integer(created),
                                           "livemode": .bool(true), "data": .object(["object": .object(object)])]
        return StripeEvent(json: Array(JSONValue.object(fields).serializedText.utf8))
    }

    @Test func checkoutSessionEventsNameTheSessionAndItsPayment() throws {
        let session: [String: JSONValue] = ["id": .string("cs_test_1"), "object": .string("checkout.session"), "payment_intent": .string("pi_1"),
                                            "client_reference_id": .string("user-17"), "payment_status": .string("unpaid"), "status": .string("complete"),
                                            "amount_total": .integer(1099), "currency": .string("eur"), "subscription": .null]
        for (type, kind) in [("checkout.session.completed", StripeEvent.Kind.checkoutSessionCompleted),
                             ("checkout.session.async_payment_succeeded", .checkoutSessionAsyncPaymentSucceeded),
                             ("checkout.session.async_payment_failed", .checkoutSessionAsyncPaymentFailed)] {
            let event = try #require(Self.event(type, session))
            #expect(event.kind == kind && event.type == type)
            #expect(event.id == "evt_1" && event.livemode && event.created == Date(timeIntervalSince1970: 1_764_400_000))
            #expect(event.checkoutSessionId == "cs_test_1" && event.paymentIntentId == "pi_1" && event.subscriptionId == nil)
            #expect(event.clientReferenceId == "user-17" && event.paymentStatus == "unpaid" && event.status == "complete")
            #expect(event.amount == 1099 && event.currency == "eur")
        }
    }

    /// A partial refund is a share of the charge, by amount; a whole one (or `refunded`) all of it.
    @Test(arguments: [(250 as Int64, false, 25_000 as Int64), (1000, true, 100_000), (333, false, 33_300), (1, false, 100), (0, false, 0),
                      (999, true, 100_000)])
    func aRefundIsTheShareOfTheChargeRefunded(_ refunded: Int64, _ whole: Bool, _ share: Int64) throws {
        let charge: [String: JSONValue] = ["id": .string("ch_1"), "object": .string("charge"), "amount": .integer(1000), "amount_refunded": .integer(refunded),
                                           "refunded": .bool(whole), "payment_intent": .string("pi_1"), "currency": .string("usd")]
        let event = try #require(Self.event("charge.refunded", charge))
        #expect(event.kind == .chargeRefunded)
        #expect(event.chargeId == "ch_1" && event.paymentIntentId == "pi_1")
        #expect(event.amount == 1000 && event.amountRefunded == refunded)
        #expect(event.refundedShare == share)
        #expect(RefundShare.takenBack(1000, share: event.refundedShare) <= refunded || whole, "never takes back more than was given back")
    }

    @Test(arguments: [("lost", true as Bool?), ("won", false), ("warning_closed", false), ("needs_response", nil), ("under_review", nil)])
    func aClosedDisputeIsWonOrLost(_ status: String, _ lost: Bool?) throws {
        let dispute: [String: JSONValue] = ["id": .string("dp_1"), "object": .string("dispute"), "charge": .string("ch_1"), "payment_intent": .string("pi_1"),
                                            "amount": .integer(1000), "currency": .string("usd"), "status": .string(status)]
        let closed = try #require(Self.event("charge.dispute.closed", dispute))
        #expect(closed.kind == .chargeDisputeClosed && closed.chargeId == "ch_1" && closed.paymentIntentId == "pi_1" && closed.objectId == "dp_1")
        #expect(closed.disputeLost == lost)
        #expect(try #require(Self.event("charge.dispute.created", dispute)).kind == .chargeDisputeCreated)
    }

    /// The subscription's period: on the subscription before API version 2025-03-31, on its items after.
    @Test func subscriptionEventsNameTheSubscriptionAndItsPeriod() throws {
        let before: [String: JSONValue] = ["id": .string("sub_1"), "object": .string("subscription"), "status": .string("past_due"),
                                           "customer": .string("cus_1"), "current_period_end": .integer(1_767_000_000), "latest_invoice": .string("in_1")]
        let after: [String: JSONValue] = ["id": .string("sub_1"), "object": .string("subscription"), "status": .string("canceled"),
                                          "items": .object(["data": .array([.object(["current_period_end": .integer(1_767_000_000)])])])]
        let updated = try #require(Self.event("customer.subscription.updated", before))
        #expect(updated.kind == .customerSubscriptionUpdated && updated.subscriptionId == "sub_1" && updated.status == "past_due")
        #expect(updated.customerId == "cus_1" && updated.invoiceId == "in_1")
        #expect(updated.periodEnd == Date(timeIntervalSince1970: 1_767_000_000))
        let deleted = try #require(Self.event("customer.subscription.deleted", after))
        #expect(deleted.kind == .customerSubscriptionDeleted && deleted.subscriptionId == "sub_1" && deleted.status == "canceled")
        #expect(deleted.periodEnd == Date(timeIntervalSince1970: 1_767_000_000))
    }

    /// An invoice names its subscription itself before API version 2025-03-31, through `parent` after.
    @Test func aPaidInvoiceNamesItsSubscriptionInEitherShape() throws {
        let lines: JSONValue = .object(["data": .array([.object(["period": .object(["start": .integer(1_764_400_000), "end": .integer(1_767_000_000)])])])])
        let before: [String: JSONValue] = ["id": .string("in_1"), "object": .string("invoice"), "subscription": .string("sub_1"), "amount_paid": .integer(499),
                                           "currency": .string("usd"), "charge": .string("ch_1"), "lines": lines]
        let after: [String: JSONValue] = ["id": .string("in_1"), "object": .string("invoice"), "amount_paid": .integer(499), "currency": .string("usd"),
                                          "parent": .object(["type": .string("subscription_details"),
                                                             "subscription_details": .object(["subscription": .string("sub_1")])]), "lines": lines]
        for object in [before, after] {
            let event = try #require(Self.event("invoice.paid", object))
            #expect(event.kind == .invoicePaid && event.invoiceId == "in_1" && event.subscriptionId == "sub_1")
            #expect(event.amount == 499 && event.currency == "usd")
            #expect(event.periodEnd == Date(timeIntervalSince1970: 1_767_000_000))
        }
    }

    /// A type the pipeline does not act on is an event all the same, with no kind: ignored, not refused. What is not an
    /// event at all is nothing.
    @Test func unknownTypesAreIgnoredAndNonEventsRefused() throws {
        let other = try #require(Self.event("customer.created", ["id": .string("cus_1"), "object": .string("customer")]))
        #expect(other.kind == nil && other.type == "customer.created" && other.objectId == "cus_1")
        #expect(StripeEvent.Kind.allCases.count == 9)
        for text in ["", "[]", "{}", #"{"id":"evt_1","type":"charge.refunded"}"#, #"{"id":"evt_1","data":{"object":{}}}"#,
                     #"{"type":"charge.refunded","data":{"object":{}}}"#, #"{"id":"","type":"x","data":{"object":{}}}"#, "{\"id\":"] {
            #expect(StripeEvent(json: Array(text.utf8)) == nil, "\(text)")
        }
    }

    // MARK: - Reading events for reconciliation

    static func client(_ api: StripeAPIStandIn) -> StripeAPIClient { StripeAPIClient(configuration: .init(baseURL: api.baseURL, secretKey: api.secretKey)) }

    /// `types[]` and `created[gte]` filter; pages follow `starting_after` until `has_more` is false; the events come oldest first.
    @Test func eventsAreReadPageByPageOldestFirst() async throws {
        let api = try StripeAPIStandIn()
        let start = Date().addingTimeInterval(-3600)
        var expected: [String] = []
        for index in 0..<230 {
            let at = start.addingTimeInterval(Double(index))
            expected.append(api.emit(type: "charge.refunded", object: ["id": .string("ch_\(index)"), "object": .string("charge")], created: at))
            api.emit(type: "customer.created", object: ["id": .string("cus_\(index)")], created: at)
        }
        api.emit(type: "charge.refunded", object: ["id": .string("ch_old")], created: start.addingTimeInterval(-60))
        let since = StripeEventCheckpoint(created: Int64(start.timeIntervalSince1970))
        let read = try await Self.client(api).events(types: ["charge.refunded", "invoice.paid"], since: since).get()
        #expect(read.events.map(\.id.rawValue) == expected)
        #expect(!read.gap)
        #expect(read.checkpoint.created == Int64(start.timeIntervalSince1970) + 229)
        #expect(read.checkpoint.handedOver == [NotificationID(expected.last!)])
        let listed = api.requests.filter { $0.hasPrefix("GET /v1/events") }
        #expect(listed.count == 3, "230 events in pages of 100")
        #expect(listed.first?.contains("types%5B%5D=charge.refunded&types%5B%5D=invoice.paid&created%5Bgte%5D=") == true, "\(listed.first ?? "")")
        #expect(listed.dropFirst().allSatisfy { $0.contains("starting_after=evt_") })
    }

    /// From the checkpoint, only what came after: events of the checkpoint's own second that were handed over are not
    /// handed over again, others of that second are.
    @Test func aCheckpointHandsEachEventOverOnce() async throws {
        let api = try StripeAPIStandIn()
        let second = Date().addingTimeInterval(-120).timeIntervalSince1970.rounded(.down)
        let first = api.emit(type: "invoice.paid", object: ["id": .string("in_1")], created: Date(timeIntervalSince1970: second))
        let client = Self.client(api)
        let read = try await client.events(types: ["invoice.paid"], since: StripeEventCheckpoint(created: Int64(second) - 10)).get()
        #expect(read.events.map(\.id.rawValue) == [first])
        let sameSecond = api.emit(type: "invoice.paid", object: ["id": .string("in_2")], created: Date(timeIntervalSince1970: second))
        let later = api.emit(type: "invoice.paid", object: ["id": .string("in_3")], created: Date(timeIntervalSince1970: second + 5))
        let next = try await client.events(types: ["invoice.paid"], since: read.checkpoint).get()
        #expect(next.events.map(\.id.rawValue) == [sameSecond, later])
        let none = try await client.events(types: ["invoice.paid"], since: next.checkpoint).get()
        #expect(none.events.isEmpty && none.checkpoint == next.checkpoint)
    }

    /// Stripe keeps 30 days of events: a checkpoint older than that says some may be gone.
    @Test func aCheckpointOlderThanThirtyDaysIsAGap() async throws {
        let api = try StripeAPIStandIn()
        api.emit(type: "invoice.paid", object: ["id": .string("in_gone")], created: Date().addingTimeInterval(-31 * 86_400))
        let kept = api.emit(type: "invoice.paid", object: ["id": .string("in_kept")], created: Date().addingTimeInterval(-29 * 86_400))
        let old = StripeEventCheckpoint(created: Int64(Date().addingTimeInterval(-40 * 86_400).timeIntervalSince1970))
        let read = try await Self.client(api).events(types: ["invoice.paid"], since: old).get()
        #expect(read.gap)
        #expect(read.events.map(\.id.rawValue) == [kept])
        let fresh = try await Self.client(api).events(types: ["invoice.paid"], since: nil).get()
        #expect(!fresh.gap && fresh.events.map(\.id.rawValue) == [kept])
    }

    @Test func aListThatDoesNotEndIsRefusedNotReadForever() async throws {
        let api = try StripeAPIStandIn()
        for index in 0..<201 { api.emit(type: "invoice.paid", object: ["id": .string("in_\(index)")], created: Date().addingTimeInterval(-600)) }
        guard case .failure(.refused(0, _)) = await Self.client(api).events(types: ["invoice.paid"], since: nil, maxPages: 2) else {
            Issue.record("more pages than allowed is refused")
            return
        }
        #expect(api.requests.count == 2)
        guard case .failure(.refused(0, _)) = await Self.client(api).eventPage(types: (0..<21).map { "type.\($0)" }) else {
            Issue.record("more than 20 types is refused before any request")
            return
        }
        #expect(api.requests.count == 2)
    }
}

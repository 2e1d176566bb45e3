import Foundation
import JSON
import PipelineHarness
import PurchaseDomain
import PurchaseStore
import StoreFixtures
import StoreVerification

/// What Stripe decides about the chaos run's web purchases while the faults happen, among those finished by then: one in
/// twenty-five refunded whole (`POST /v1/refunds`, its `charge.refunded`), a quarter of them at each of 20, 40, 60 and 80 %
/// of progress; one or two disputes lost and as many won, opened (`charge.dispute.created`) at 20 and 40 %, each closed
/// (`charge.dispute.closed`, lost or won, a second or more after its opening) two rounds later, but the second at once.
///
/// Every event is in Stripe's list (`GET /v1/events`); about half are also delivered to the ingest by a signed webhook,
/// every third delivery twice (Stripe retries what it was not answered), the rest lost: read back by the sweeper's
/// reconciliation. Every other refund's event is lost; of the disputes, in the order opened, the first's closing is lost,
/// the second's opening (its closing, won, is delivered at once: handled before the reconciliation reads its opening, which
/// is then outdated), the third's neither, the fourth's both.
///
/// How it must end: each purchase refunded, or of a lost dispute, revoked once, what it gave taken back; each of a won
/// dispute finished, what it gives held (given back, or never taken when its closing came first and made its opening
/// outdated); every event handled, so that a further reconciliation pass would publish nothing.
struct StripeDecisionPlan {
    private let rounds: [Double] = [0.2, 0.4, 0.6, 0.8]
    private var round = 0
    /// How many refunds, lost disputes and won disputes it makes.
    let wanted: (refunds: Int, lost: Int, won: Int)
    /// The web purchases (but the stale ones, never finished).
    private let purchases: Set<TransactionID>
    /// The purchases refunded, and those disputed (lost, won), in the order decided.
    private(set) var refunded: [TransactionID] = [], disputesLost: [TransactionID] = [], disputesWon: [TransactionID] = []
    /// The disputes open: their purchase, whether it is won, the round it closes in, its opening's `created`, and the
    /// order it was opened in (from 0).
    private var open: [(purchase: TransactionID, won: Bool, closes: Int, opened: Int64, index: Int)] = []
    /// The `created` second of the last event about each purchase decided: the decision the store must hold last.
    private var lastDecision: [TransactionID: Int64] = [:]
    /// Every event made (`NotificationID`: Stripe's id), those lost, the deliveries acknowledged (a repeat counts), the
    /// events delivered twice, and the deliveries retried and never acknowledged.
    private(set) var events: [NotificationID] = []
    private(set) var lost = 0, delivered = 0, duplicated = 0, retried = 0, undelivered = 0

    init(_ input: PurchaseInput) {
        let web = input.purchases(of: .stripe).filter { !$0.stale }
        purchases = Set(web.map(\.transactionId))
        let disputes = web.count >= 100 ? 2 : web.isEmpty ? 0 : 1
        wanted = (web.count / 25, disputes, disputes)
    }

    var isComplete: Bool { round == rounds.count }

    /// Revoked in the end: refunded or a dispute lost.
    var revoked: Set<TransactionID> { Set(refunded + disputesLost) }
    var restored: Set<TransactionID> { Set(disputesWon) }

    /// Makes the round's decisions when it is due at `progress`, among the web purchases `finished` (read only then; none
    /// decided before), through `stripe`'s API and its list, and delivers every other event to the ingest (asked of
    /// `ingest`). What it did, to tell; nil when no round was due.
    mutating func decide(at progress: Double, finished: () -> Set<TransactionID>, stripe: StandInStripe,
                         ingest: () async throws -> String) async throws -> String? {
        guard round < rounds.count, rounds[round] <= progress else { return nil }
        defer { round += 1 }
        var candidates = finished().filter { purchases.contains($0) && lastDecision[$0] == nil }.shuffled().makeIterator()
        var made: [(event: String, lost: Bool)] = []
        let client = StripeAPIClient(configuration: .init(baseURL: stripe.api.baseURL, secretKey: stripe.api.secretKey))
        let refundedBefore = refunded.count
        for _ in 0..<max(0, wanted.refunds * (round + 1) / rounds.count - refunded.count) {
            guard let id = candidates.next(), let intent = paymentIntent(of: id) else { break }
            let before = stripe.api.eventIds.count
            _ = try await client.refund(paymentIntent: intent, idempotencyKey: UUID().uuidString).get()
            guard let event = stripe.api.eventIds.dropFirst(before).first else { throw HarnessError("Stripe listed no charge.refunded for \(intent)") }
            made.append((event, spreadEvenly(refunded.count, share: 0.5)))
            refunded.append(id)
            lastDecision[id] = created(event, in: stripe)
        }
        // Disputes open in the first two rounds, half of each kind in each.
        var opening = 0
        if round < 2 {
            for (won, count) in [(false, wanted.lost), (true, wanted.won)] {
                for _ in 0..<(round == 0 ? (count + 1) / 2 : count / 2) {
                    guard let id = candidates.next(), let dispute = dispute(of: id, status: "needs_response", in: stripe) else { break }
                    let event = stripe.api.emit(type: "charge.dispute.created", object: dispute)
                    let opened = created(event, in: stripe), index = disputesWon.count + disputesLost.count
                    open.append((id, won, won && index % 4 == 1 ? round : round + 2, opened, index))
                    opening += 1
                    if won { disputesWon.append(id) } else { disputesLost.append(id) }
                    lastDecision[id] = opened
                    made.append((event, index % 4 == 1 || index % 4 == 3))
                }
            }
        }
        let closing = open.filter { $0.closes == round }
        open.removeAll { $0.closes == round }
        for dispute in closing {
            guard let object = self.dispute(of: dispute.purchase, status: dispute.won ? "won" : "lost", in: stripe) else { continue }
            // A later second than its opening: the store orders a refund and its reversal by their seconds.
            let at = max(Date(), Date(timeIntervalSince1970: TimeInterval(dispute.opened + 1)))
            let event = stripe.api.emit(type: "charge.dispute.closed", object: object, created: at)
            // A lost dispute's closing changes nothing: the store's last decision is its opening.
            if dispute.won { lastDecision[dispute.purchase] = created(event, in: stripe) }
            made.append((event, dispute.index % 4 == 0 || dispute.index % 4 == 3))
        }
        var deliveries: [String] = []
        for (event, isLost) in made {
            events.append(NotificationID(event))
            if isLost { lost += 1; continue }
            deliveries.append(event)
            if (events.count - lost) % 3 == 1 { deliveries.append(event); duplicated += 1 }
        }
        let delivery = try await stripe.deliver(deliveries, to: ingest)
        delivered += deliveries.count - delivery.undelivered
        retried += delivery.retried
        undelivered += delivery.undelivered
        return String(format: "refunded %d web purchases, opened %d and closed %d disputes at %.0f %% (%d events delivered by webhook)",
                      refunded.count - refundedBefore, opening, closing.count, progress * 100, deliveries.count)
    }

    private func paymentIntent(of id: TransactionID) -> String? {
        // The line item's transaction id is `{session}.{line item}`; the stand-in names the payment intent after the purchase.
        guard let session = id.rawValue.split(separator: ".").first, session.hasPrefix("cs_test_") else { return nil }
        return StandInStripe.names(of: String(session.dropFirst("cs_test_".count))).paymentIntent
    }

    /// The dispute of the purchase's charge in `status`, as Stripe writes it in its events.
    private func dispute(of id: TransactionID, status: String, in stripe: StandInStripe) -> [String: JSONValue]? {
        guard let intent = paymentIntent(of: id), let charge = stripe.api.charge(paymentIntent: intent) else { return nil }
        return ["id": .string("dp_" + charge.id.dropFirst(3)), "object": .string("dispute"), "charge": .string(charge.id), "payment_intent": .string(intent),
                "amount": .integer(charge.amount), "currency": .string(charge.currency), "status": .string(status), "reason": .string("fraudulent")]
    }

    /// The event's `created` second, as Stripe lists it.
    private func created(_ event: String, in stripe: StandInStripe) -> Int64 {
        stripe.api.eventBody(event).flatMap { JSONValue.parse(Array($0))?.objectValue?["created"]?.int64Value } ?? 0
    }

    /// The store's state of each purchase decided, and its latest refund decision: the purchases whose last decision the
    /// store holds as their story ends (revoked, or finished after a won dispute).
    func settled(in store: SQLPurchaseStore) async throws -> Int {
        var settled = 0
        for (id, last) in lastDecision {
            let key = PurchaseKey(store: .stripe, transactionId: id)
            let expected: PurchaseState = disputesWon.contains(id) ? .finished : .revoked
            guard try await store.purchase(key)?.state == expected,
                  try await store.latestRefundDecision(key).map({ Int64($0.timeIntervalSince1970.rounded()) }) == last else { continue }
            settled += 1
        }
        return settled
    }

    var decided: Int { lastDecision.count }

    /// Those of its events the verifier has not handled: what another reconciliation pass would publish.
    func unhandled(by store: SQLPurchaseStore) async throws -> Int { try await store.unseenNotifications(events).count }

    /// Whether the store holds every decision as its story ends and has handled every event (the chaos run waits for it).
    func isSettled(in store: SQLPurchaseStore) async throws -> Bool {
        guard try await unhandled(by: store) == 0 else { return false }
        return try await settled(in: store) == decided
    }

    /// The report's figures (the web purchases and their consumption reports, the decisions and how their events went,
    /// the purchases settled and the events not handled) and the violations of the run's end: a decision the store does
    /// not hold, an event never handled or never acknowledged by the ingest.
    func report(_ input: PurchaseInput, store: SQLPurchaseStore) async throws -> (summary: JSONValue, violations: [String]) {
        let (settled, unhandled) = (try await settled(in: store), try await unhandled(by: store))
        var violations: [String] = []
        if settled < decided { violations.append("\(decided - settled) of \(decided) web purchases refunded or disputed at Stripe not as the last decision left them") }
        if unhandled > 0 { violations.append("\(unhandled) of Stripe's \(events.count) events never handled (\(lost) lost)") }
        if undelivered > 0 { violations.append("\(undelivered) Stripe webhook deliveries never acknowledged by the ingest") }
        func count(_ value: Int) -> JSONValue { .integer(Int64(value)) }
        let web = input.purchases(of: .stripe)
        return (.object([
            "purchases": count(web.count), "consumptionReports": count(input.consumptionReports.count), "flaggedAtDeadline": count(web.count(where: \.isFlaggedAtDeadline)),
            "refunded": count(refunded.count), "disputesLost": count(disputesLost.count), "disputesWon": count(disputesWon.count),
            "events": count(events.count), "delivered": count(delivered), "duplicated": count(duplicated), "lost": count(lost),
            "retried": count(retried), "undelivered": count(undelivered), "settled": count(settled), "unhandled": count(unhandled),
        ]), violations)
    }

    var description: String {
        "\(refunded.count) web purchases refunded, \(disputesLost.count) disputes lost and \(disputesWon.count) won: \(events.count) events, "
            + "\(events.count - lost) delivered by webhook (\(duplicated) twice, \(delivered) deliveries acknowledged, \(undelivered) never), "
            + "\(lost) lost and read back from Stripe's list by the reconciler"
    }
}

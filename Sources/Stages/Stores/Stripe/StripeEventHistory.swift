import Foundation
import JSON
import PurchaseDomain
import PurchaseEvents
import StoreVerification

/// Stripe's events of the types the pipeline acts on (`GET /v1/events`; Stripe keeps 30 days), oldest first: each one
/// published on `store.notification` as its webhook would have been, under the same id (Stripe's event id), for the
/// verifier to carry out and record as handled. An event the webhook brought is recorded so already and is not published
/// again; one handled twice would change nothing (a grant is granted once, a revocation revokes once).
public struct StripeEventHistory: StoreHistory {
    public var api: StripeAPIClient

    public init(api: StripeAPIClient) { self.api = api }

    /// The types read: those the pipeline acts on (`StripeEvent.Kind`).
    public static let types = StripeEvent.Kind.allCases.map(\.rawValue)

    public var name: String { "stripe" }
    public var checkpoint: String { "stripe.events" }
    public var kept: TimeInterval { StripeAPIClient.eventsKept }
    public var recordsPublished: Bool { false }

    /// Every event created from `start` (its second) to `end`, on one page: Stripe lists them newest first, and they are
    /// published oldest first (what was told of one purchase, in the order it happened).
    public func page(from start: Date, to end: Date, token: String?, readAt: Date) async -> Result<StoreHistoryPage, StoreHistoryFailure> {
        let since = StripeEventCheckpoint(created: Int64(start.timeIntervalSince1970.rounded(.down)))
        switch await api.events(types: Self.types, since: since, until: end, now: readAt) {
        case .success(let read):
            return .success(.init(entries: read.events.map { Self.entry($0, receivedAt: readAt) }, nextToken: nil))
        case .failure(.unavailable(let why, let retryAfter)):
            return .failure(.unavailable(why, retryAfter: retryAfter))
        case .failure(let failure):
            return .failure(.refused("events: \(failure)"))
        }
    }

    /// An event as the webhook's route publishes it (`IngestAPI.stripeEvent`): Stripe's id, keyed by its purchase.
    static func entry(_ event: StripeEvent, receivedAt: Date) -> StoreHistoryPage.Entry {
        StoreHistoryPage.Entry(id: event.id, event: StoreNotificationReceived(
            stripeEvent: JSONValue.object(event.raw).serializedText, eventId: event.id, subject: event.purchaseSubject, receivedAt: receivedAt))
    }
}

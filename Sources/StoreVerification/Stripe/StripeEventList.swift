import Foundation
import JSON
import PurchaseDomain

/// One page of `GET /v1/events`: newest first, as Stripe lists them.
public struct StripeEventPage: Sendable, Hashable {
    public var events: [StripeEvent]
    /// Whether older events follow (asked for with `starting_after` the last event's id).
    public var hasMore: Bool
}

/// Where reading events for reconciliation stands: the second of the newest event handed over, and the events of that
/// second handed over already (`created[gte]` reads that second again: events of one second come in no set order).
public struct StripeEventCheckpoint: Sendable, Hashable, Codable {
    /// Unix seconds.
    public var created: Int64
    public var handedOver: Set<NotificationID>

    public init(created: Int64, handedOver: Set<NotificationID> = []) {
        self.created = created
        self.handedOver = handedOver
    }
}

/// What a read from a checkpoint found: the events not handed over before, oldest first, and the checkpoint after them.
public struct StripeEventRead: Sendable, Hashable {
    public var events: [StripeEvent]
    public var checkpoint: StripeEventCheckpoint
    /// The checkpoint was older than the 30 days Stripe keeps events: some of that time's events are gone, and what they
    /// changed is to be read from the objects themselves.
    public var gap: Bool
}

extension StripeAPIClient {
    /// Stripe lists the events of the last 30 days.
    public static let eventsKept: TimeInterval = 30 * 86_400
    /// Stripe's largest page.
    public static let eventPageSize = 100
    /// Stripe filters on at most 20 types at once.
    public static let maxEventTypes = 20

    /// `GET /v1/events?types[]=…&created[gte]=…&created[lt]=…&limit=…&starting_after=…`: one page, newest first.
    /// - Parameter types: Stripe's type names (`checkout.session.completed`, …); empty: every type.
    public func eventPage(types: [String], createdSince: Int64? = nil, createdBefore: Int64? = nil, startingAfter: String? = nil,
                          limit: Int = eventPageSize) async -> Result<StripeEventPage, Failure> {
        guard types.count <= Self.maxEventTypes else { return .failure(.refused(status: 0, detail: "at most \(Self.maxEventTypes) event types at once")) }
        var query: [(name: String, value: String)] = types.map { ("types[]", $0) }
        if let createdSince { query.append(("created[gte]", String(createdSince))) }
        if let createdBefore { query.append(("created[lt]", String(createdBefore))) }
        query.append(("limit", String(min(max(limit, 1), Self.eventPageSize))))
        if let startingAfter {
            guard Self.isStripeID(startingAfter) else { return .failure(.refused(status: 0, detail: "starting_after is not a Stripe id")) }
            query.append(("starting_after", startingAfter))
        }
        return await get("events", query: query).flatMap { fields in
            guard fields["object"]?.stringValue == "list", let listed = fields["data"]?.arrayValue else {
                return .failure(.unavailable("Stripe API: an answer to GET /v1/events that is not a list"))
            }
            let events = listed.compactMap { $0.objectValue.flatMap(StripeEvent.init) }
            guard events.count == listed.count else { return .failure(.unavailable("Stripe API: a listed event without its id, type or object")) }
            return .success(StripeEventPage(events: events, hasMore: fields["has_more"]?.boolValue == true))
        }
    }

    /// The events of `types` created since `checkpoint` (nil: the 30 days Stripe keeps) and before `until` (nil: now),
    /// oldest first, without those handed over at the checkpoint: every page, `starting_after` the last of the one
    /// before, until Stripe says there are no more. More than `maxPages` pages is refused (`refused`, status 0): read a
    /// narrower span (`until`).
    public func events(types: [String], since checkpoint: StripeEventCheckpoint?, until: Date? = nil, now: Date = Date(),
                       maxPages: Int = 100) async -> Result<StripeEventRead, Failure> {
        let oldestKept = Int64((now.timeIntervalSince1970 - Self.eventsKept).rounded(.up))
        let since = checkpoint?.created ?? oldestKept
        let before = until.map { Int64($0.timeIntervalSince1970.rounded(.up)) }
        var newestFirst: [StripeEvent] = []
        var seen: Set<NotificationID> = []
        var startingAfter: String?
        for _ in 0..<max(1, maxPages) {
            let page: StripeEventPage
            switch await eventPage(types: types, createdSince: since, createdBefore: before, startingAfter: startingAfter) {
            case .success(let answered): page = answered
            case .failure(let failure): return .failure(failure)
            }
            // An event listed twice (Stripe's cursor is stable; a fault otherwise) is handed over once.
            for event in page.events where seen.insert(event.id).inserted { newestFirst.append(event) }
            guard page.hasMore else { return .success(Self.read(newestFirst, after: checkpoint, since: since, gap: since < oldestKept)) }
            guard let last = page.events.last?.id.rawValue else { return .failure(.unavailable("Stripe API: an empty page of events that says it has more")) }
            startingAfter = last
        }
        return .failure(.refused(status: 0, detail: "more than \(maxPages) pages of events since \(since): read a narrower span"))
    }

    /// The events read, oldest first, less those handed over at the checkpoint, and the checkpoint after them.
    static func read(_ newestFirst: [StripeEvent], after checkpoint: StripeEventCheckpoint?, since: Int64, gap: Bool) -> StripeEventRead {
        let seconds = { (event: StripeEvent) in event.created.map { Int64($0.timeIntervalSince1970) } ?? since }
        let handedOver = checkpoint?.handedOver ?? []
        // Stable: events of one second keep the reverse of Stripe's order, the order Stripe created them in.
        let oldestFirst = newestFirst.reversed().enumerated().sorted { ($0.element.created ?? .distantPast, $0.offset) < ($1.element.created ?? .distantPast, $1.offset) }
            .map(\.element)
            .filter { !(seconds($0) == checkpoint?.created && handedOver.contains($0.id)) }
        var next = checkpoint ?? StripeEventCheckpoint(created: since)
        for event in oldestFirst {
            let second = seconds(event)
            if second > next.created { next = StripeEventCheckpoint(created: second) }
            if second == next.created { next.handedOver.insert(event.id) }
        }
        return StripeEventRead(events: oldestFirst, checkpoint: next, gap: gap)
    }
}

import Foundation
import PurchaseDomain

/// `store.notification`: a store's notification as it arrived: an App Store Server Notification V2 as Apple sent it
/// (`signedPayload`), or a Google Play real-time developer notification (`developerNotification`, the Pub/Sub message's
/// data, decoded: a JSON text), whose push the ingest authenticated.
public struct StoreNotificationReceived: PipelineEvent, Hashable {
    public static let type = EventType.storeNotification
    public var store: Store
    public var signedPayload: String?
    public var developerNotification: String?
    /// A Stripe event (`evt_…`) as JSON text: a webhook delivery's body, or the event as `GET /v1/events` lists it.
    public var stripeEvent: String?
    public var receivedAt: Date
    /// The purchase token a Google Play notification is about: its message key, so that what is told of one purchase is
    /// handled in order. Not in the event's body.
    public var purchaseToken: PurchaseToken?
    /// A Stripe event's own id (`evt_…`): its `eventID`, the same for the webhook's copy and reconciliation's (whose bytes
    /// differ). Not in the event's body.
    public var stripeEventId: NotificationID?
    /// The Stripe object a Stripe event's purchase is known by (its subscription, else its payment intent): its message
    /// key, so that what is told of one purchase is handled in order. Not in the event's body.
    public var stripeSubject: String?

    enum CodingKeys: String, CodingKey { case store, signedPayload, developerNotification, stripeEvent, receivedAt }

    public init(signedPayload: String, receivedAt: Date) {
        self.store = .appstore
        self.signedPayload = signedPayload
        self.receivedAt = receivedAt
    }

    /// A Google Play real-time developer notification about `purchaseToken` (nil: a test notification).
    public init(developerNotification: String, purchaseToken: PurchaseToken?, receivedAt: Date) {
        self.store = .googleplay
        self.developerNotification = developerNotification
        self.purchaseToken = purchaseToken
        self.receivedAt = receivedAt
    }

    /// A Stripe event (`stripeEvent`, its JSON text) whose id is `eventId`, about the purchase Stripe knows by `subject`
    /// (its subscription or payment intent; nil: none, keyed by the event).
    public init(stripeEvent: String, eventId: NotificationID, subject: String?, receivedAt: Date) {
        self.store = .stripe
        self.stripeEvent = stripeEvent
        self.stripeEventId = eventId
        self.stripeSubject = subject
        self.receivedAt = receivedAt
    }

    /// What the store sent.
    public var content: String { signedPayload ?? developerNotification ?? stripeEvent ?? "" }

    /// Notifications have no user: an App Store one is keyed by its content so retries of one notification stay together,
    /// a Google Play one by its purchase token and a Stripe one by its purchase's subscription or payment intent, so
    /// that those of one purchase stay in order.
    public var messageKey: Data? {
        if let purchaseToken { return Data("googleplay:\(purchaseToken)".utf8) }
        if let subject = stripeSubject ?? stripeEventId?.rawValue { return Data("stripe:\(subject)".utf8) }
        return Data(("notification:\(ContentHash.hex(content).prefix(16))").utf8)
    }
    public var eventID: String {
        // The App Store's ids were minted before other stores had notifications: kept as they were, without the store.
        switch store {
        case .appstore: "notification:\(ContentHash.hex(content))"
        // Stripe's event id, not the content: a webhook's copy and the same event listed by `GET /v1/events` differ in
        // bytes (`pending_webhooks`, the order of members) and are one event.
        case .stripe: "notification:stripe:\(stripeEventId?.rawValue ?? ContentHash.hex(content))"
        case .appcoins, .googleplay: "notification:\(store.rawValue):\(ContentHash.hex(content))"
        }
    }
}

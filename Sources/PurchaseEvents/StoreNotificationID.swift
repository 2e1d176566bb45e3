import Foundation
import JSON
import PurchaseDomain

extension StoreNotificationReceived {
    /// An App Store notification's own id (`notificationUUID`), read from the payload without verifying it: to tell whether
    /// it was handled, never to act on.
    public var notificationID: NotificationID? {
        signedPayload.flatMap(Base64URL.unverifiedJWSPayload)?["notificationUUID"]?.stringValue.map { NotificationID($0) }
    }
}

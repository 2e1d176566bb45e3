import Foundation
import JSON
import PurchaseDomain

extension StoreNotificationReceived {
    /// The notification's own id (`notificationUUID`), read from the payload without verifying it: to tell whether it was
    /// handled, never to act on.
    public var notificationID: NotificationID? {
        Base64URL.unverifiedJWSPayload(signedPayload)?["notificationUUID"]?.stringValue.map { NotificationID($0) }
    }
}

import Foundation
import JSON
import PurchaseDomain

extension StoreNotificationReceived {
    /// The notification's own id (`notificationUUID`), read from the payload without verifying it: to tell whether it was
    /// handled, never to act on.
    public var notificationID: NotificationID? {
        let segments = signedPayload.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard segments.count == 3, let payload = Base64URL.decode(ArraySlice(segments[1])),
              let uuid = JSONValue.parse(payload)?.objectValue?["notificationUUID"]?.stringValue else { return nil }
        return NotificationID(uuid)
    }
}

import Foundation
import PurchaseDomain

/// `user.token`: the account token an app's backend makes for a user and has the app give StoreKit with every purchase
/// (`appAccountToken`), registered when it is made, before any purchase. A charge the store announces with that token
/// and no submission (the app died after the payment) then goes to the user at once. A token names one user: the first
/// registration stands, and another user's registration of it is refused (dead-lettered, `accountTokenOfAnotherUser`).
public struct UserAccountTokenRegistered: PipelineEvent, Hashable {
    public static let type = EventType.userToken
    public var userId: UserID
    public var appAccountToken: AccountToken
    public var registeredAt: Date

    public init(userId: UserID, appAccountToken: AccountToken, registeredAt: Date) {
        self.userId = userId
        self.appAccountToken = appAccountToken
        self.registeredAt = registeredAt
    }

    public var messageKey: Data? { Data(userId.rawValue.utf8) }
    /// One per user and token (whatever the case of its letters): a registration sent again is the same event.
    public var eventID: String { "token:\(userId):\(appAccountToken.folded)" }
}

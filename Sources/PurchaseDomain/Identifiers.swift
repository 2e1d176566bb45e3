@_exported import Identifiers

/// The kinds of identifiers the pipeline takes from outside: each is an `Identifier`, equal to another only when their
/// UTF-8 bytes are (never normalized), so that a user, a transaction or a product is the same one here as on the broker
/// and in the database.
public enum IdentifierKinds {
    public enum User {}
    public enum Transaction {}
    public enum Product {}
    public enum AccountToken {}
    public enum Package {}
    public enum PurchaseToken {}
    public enum Bundle {}
    public enum Notification {}
    public enum App {}
    public enum Adjustment {}
    public enum Item {}
}

/// A user of the operator's app, as the app's backend names them (the Kafka key of their events).
public typealias UserID = Identifier<IdentifierKinds.User>
/// A store's transaction id (also an original transaction id).
public typealias TransactionID = Identifier<IdentifierKinds.Transaction>
/// A store's product id (an AppCoins SKU, a Google Play product id).
public typealias ProductID = Identifier<IdentifierKinds.Product>
/// The account a store binds a purchase to (App Store `appAccountToken`; Google Play `obfuscatedAccountId` when it is one).
public typealias AccountToken = Identifier<IdentifierKinds.AccountToken>
/// An app's package name (AppCoins, Google Play).
public typealias PackageName = Identifier<IdentifierKinds.Package>
/// An AppCoins or Google Play purchase token.
public typealias PurchaseToken = Identifier<IdentifierKinds.PurchaseToken>
/// An App Store app's bundle id.
public typealias BundleID = Identifier<IdentifierKinds.Bundle>
/// One of the deployment's apps, as its apps file names it (`coins-game`); the same app on several stores is one app.
public typealias AppID = Identifier<IdentifierKinds.App>
/// An operator's adjustment of a user's books, by the idempotency key its request carries.
public typealias AdjustmentID = Identifier<IdentifierKinds.Adjustment>
/// A store notification's own id (App Store `notificationUUID`).
public typealias NotificationID = Identifier<IdentifierKinds.Notification>
/// A currency's or an entitlement's code, as the catalog names it (`coins`, `pass`): what balances and entitlements are
/// keyed by, here as in the database. A `String`-keyed map of them does not compile: two spellings of one text
/// (`café` in NFC and NFD) are two codes, as they are two rows.
public typealias ItemCode = Identifier<IdentifierKinds.Item>

/// The most characters (code points) each kind of id may have in an event, as `common.v1.schema.json` states (and, for
/// the others, the schemas that carry them): the `maxLength` of `IdentifierRule`.
public enum IdentifierLimits {
    public static let user = 256
    public static let transaction = 512
    public static let product = 256
    public static let notification = 64
    public static let accountToken = 256
    /// A subscription offer's identifier (`subscription.status`).
    public static let offer = 256
}

extension Identifier where Kind == IdentifierKinds.AccountToken {
    /// The token with its ASCII letters in lower case: one spelling per account (`isSameAccount`), for keys.
    public var folded: AccountToken {
        AccountToken(String(decoding: rawValue.utf8.map(Self.folded), as: UTF8.self))
    }

    /// Whether two tokens name the same account: equal bytes but for the case of ASCII letters (a UUID's hex digits are
    /// written in upper case by StoreKit and in lower case by many backends); any other byte must be the same.
    public func isSameAccount(as other: AccountToken) -> Bool {
        let (mine, theirs) = (rawValue.utf8, other.rawValue.utf8)
        return mine.count == theirs.count && zip(mine, theirs).allSatisfy { Self.folded($0) == Self.folded($1) }
    }

    private static func folded(_ byte: UInt8) -> UInt8 { (0x41...0x5A).contains(byte) ? byte | 0x20 : byte }
}

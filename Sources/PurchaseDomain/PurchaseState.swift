/// Where a purchase is in its life. The lifecycle (`Lifecycle`) says which events move it where.
///
/// `unseen` and `revokedUnseen` have no purchase record: nothing is known of the transaction, or only that the
/// store refunded or revoked it (a tombstone) before the pipeline saw the purchase. The others are the
/// `purchases.state` column (raw values are its spelling).
public enum PurchaseState: String, Codable, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case unseen
    case revokedUnseen = "revoked_unseen"
    /// The store announced the charge (its own notification) and no user is known for it yet: nothing is granted; the
    /// first submission of it claims it for its user.
    case unclaimed
    /// The store proved the payment; nothing is granted yet.
    case verified
    /// Its items are in the user's balance or entitlements; the store's transaction is not finished yet.
    case granted
    /// Granted and completed with the store (or consumed): nothing is owed on either side.
    case finished
    /// Verification refused it; nothing was granted.
    case rejected
    /// Paid, not consumed by the store's deadline: the store refunds it.
    case refundDue = "refund_due"
    /// Refunded or revoked by the store (or a due refund clawed back): its grants are reversed.
    case revoked

    public var description: String { rawValue }

    /// Whether a purchase in this state has a record in the purchases table.
    public var isRecorded: Bool { self != .unseen && self != .revokedUnseen }

    /// The states a purchase record can be in.
    public static let recorded: [PurchaseState] = allCases.filter(\.isRecorded)
}

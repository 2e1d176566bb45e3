import JSON
import PipelineHarness
import StoreVerification

/// The App Store's own notifications about the chaos run's subscriptions (rule 5: events do not arrive in order).
///
/// Each subscription's first period (silver, ended 10 days ago) gets its `EXPIRED`: a third of them before any
/// submission is sent, when nothing of the subscription is recorded (the period's own expiry, long past, ends it
/// anyway), the rest half-way through, when its renewal and the upgrade that followed are mostly granted. An expiry
/// names its period, so it must end neither of those: the books' check of the tiers each subscriber holds (gold until
/// the upgrade's expiry) fails if it did. Half-way, each renewal's `DID_RENEW` and each upgrade's
/// `DID_CHANGE_RENEWAL_PREF` (`UPGRADE`) come too: charges the app submits as well, recorded for the subscription's
/// owner and granted once whichever comes first (dropped when nobody owns the subscription yet: the app's submission
/// records it then).
struct SubscriptionNotificationPlan {
    typealias Notification = (type: AppStoreNotificationType, subtype: String?, period: PurchaseInput.Purchase)

    /// The `EXPIRED`s sent before the submissions.
    let first: [Notification]
    /// What is sent half-way, once.
    private let midway: [Notification]
    private(set) var sentMidway = false

    init(_ input: PurchaseInput) {
        var first: [Notification] = [], midway: [Notification] = []
        // Each the first period, its renewal, the upgrade (`PurchaseInput.subscriptionPeriods`), App Store purchases all.
        for (index, ordered) in input.subscriptions.enumerated() {
            guard ordered.count == 3, case .appstore = ordered[0].store else { continue }
            if index % 3 == 0 { first.append((.expired, "VOLUNTARY", ordered[0])) } else { midway.append((.expired, "VOLUNTARY", ordered[0])) }
            midway.append((.didRenew, nil, ordered[1]))
            midway.append((.didChangeRenewalPref, "UPGRADE", ordered[2]))
        }
        (self.first, self.midway) = (first, midway)
    }

    /// What to send now: the half-way notifications once `progress` passes a half, else none.
    mutating func due(at progress: Double) -> [Notification] {
        guard !sentMidway, progress >= 0.5 else { return [] }
        sentMidway = true
        return midway
    }

    /// The report's counts: expiries (before the submissions, half-way), renewals, upgrades.
    var summary: JSONValue {
        func count(_ type: AppStoreNotificationType, in list: [Notification]) -> JSONValue { .integer(Int64(list.count { $0.type == type })) }
        return .object(["expiredFirst": count(.expired, in: first), "expiredMidway": count(.expired, in: midway),
                        "renewals": count(.didRenew, in: midway), "upgrades": count(.didChangeRenewalPref, in: midway)])
    }

    var description: String {
        "\(first.count) EXPIRED before the submissions; half-way \(midway.count { $0.type == .expired }) EXPIRED, "
            + "\(midway.count { $0.type == .didRenew }) DID_RENEW, \(midway.count { $0.type == .didChangeRenewalPref }) DID_CHANGE_RENEWAL_PREF (UPGRADE)"
            + (sentMidway ? "" : " (not sent)")
    }
}

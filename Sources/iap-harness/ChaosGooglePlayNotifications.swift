import JSON
import PipelineHarness
import PurchaseDomain
import PurchaseStore

/// Google Play's real-time developer notifications in the chaos run (`oneTimeProductNotification`, purchased), pushed to
/// the ingest as Google pushes them: Pub/Sub, OIDC-authenticated, retried until answered 2xx.
///
/// A share of the submitted Google Play one-time purchases (`--googleplay-notifications`, half by default, spread evenly)
/// is announced too: a third of them before any submission is sent (recorded unclaimed, then claimed by the app's
/// submission, or claimed at once when the submission overtook the push), the rest once the app's submission was
/// granted (a repeat: granted, and completed at Google, once all the same); one in four of them pushed twice, as Pub/Sub
/// delivers at least once. The Google Play consumables no app ever submits (`--unsubmitted`, the same share as the
/// App Store's) are announced only so: those without an account token with the first pushes (paid four days ago: each
/// flagged unclaimed once), those with their buyer's token once the purchase that bound it was answered (each granted
/// to that user once, and consumed at Google once).
struct GooglePlayNotificationPlan {
    /// The submitted purchases announced, those of them announced before the submissions, and those pushed twice.
    let announced: [PurchaseInput.Purchase]
    let first: [PurchaseInput.Purchase]
    let duplicated: Set<TransactionID>
    /// The charges announced only by a notification.
    private(set) var unsubmitted: UnsubmittedChargePlan
    /// Announced once granted: those not yet.
    private var afterGrant: [PurchaseInput.Purchase]
    /// Pushes the ingest acknowledged, those that needed more than one attempt, and those never acknowledged; the answers
    /// that refused a push (status → count; 0: none).
    private(set) var pushed = 0, retried = 0, undelivered = 0
    private(set) var refusals: [Int: Int] = [:]

    init(_ input: PurchaseInput, share: Double, unsubmitted: UnsubmittedCharges) {
        let oneTime = input.purchases(of: .googleplay).filter { !$0.product.isSubscription }
        let announced = oneTime.indices.filter { spreadEvenly($0, share: share) }.map { oneTime[$0] }
        self.announced = announced
        first = announced.indices.filter { $0 % 3 == 0 }.map { announced[$0] }
        afterGrant = announced.indices.filter { $0 % 3 != 0 }.map { announced[$0] }
        duplicated = Set(announced.indices.filter { $0 % 4 == 1 }.map { announced[$0].transactionId })
        self.unsubmitted = UnsubmittedChargePlan(unsubmitted)
    }

    /// What to push before any submission: the first announcements, and the charges without a token.
    var early: [PurchaseInput.Purchase] { first + unsubmitted.early }

    /// What to push now: the announcements of purchases `granted` since, and the charges whose binding is among `answered`.
    mutating func due(granted: Set<TransactionID>, answered: Set<TransactionID>) -> [PurchaseInput.Purchase] {
        var due: [PurchaseInput.Purchase] = []
        afterGrant.removeAll { purchase in
            guard granted.contains(purchase.transactionId) else { return false }
            due.append(purchase)
            return true
        }
        return due + unsubmitted.due(answered: answered)
    }

    var allPushed: Bool { afterGrant.isEmpty && unsubmitted.allAnnounced }

    /// Pushes the notifications of `purchases` (twice those `duplicated`) to the ingest (its address asked of `ingest`),
    /// through `push`, until each is acknowledged.
    mutating func push(_ purchases: [PurchaseInput.Purchase], with push: GooglePlayPush, to ingest: () async throws -> String) async throws {
        guard !purchases.isEmpty else { return }
        let notifications = purchases.flatMap { purchase in
            Array(repeating: GooglePlayPush.oneTimeProduct(token: StandInGooglePlay.token(ofOrder: purchase.transactionId), product: purchase.productId),
                  count: duplicated.contains(purchase.transactionId) ? 2 : 1)
        }
        let delivery = try await push.deliver(notifications, to: ingest)
        pushed += notifications.count - delivery.undelivered
        retried += delivery.retried
        undelivered += delivery.undelivered
        refusals.merge(delivery.refusals, uniquingKeysWith: +)
    }

    /// The report's figures: the pushes, what was announced and when, and how it ended: each announced purchase granted
    /// once and completed at Google once (`completedOnce`: `announced` but those among `googlePlayViolations`' purchases), the
    /// charges announced only granted by their token (`grantedByToken`) or flagged unclaimed (`flaggedUnclaimed`).
    func summary(completedOnce: Int, grantedByToken: Int, flaggedUnclaimed: Int) -> JSONValue {
        func count(_ value: Int) -> JSONValue { .integer(Int64(value)) }
        return .object([
            "pushed": count(pushed), "retried": count(retried), "undelivered": count(undelivered),
            "refusedByStatus": .object(Dictionary(uniqueKeysWithValues: refusals.map { (String($0.key), count($0.value)) })),
            "announced": count(announced.count), "beforeSubmission": count(first.count), "afterGrant": count(announced.count - first.count),
            "duplicated": count(duplicated.count), "announcedCompletedOnce": count(completedOnce),
            "onlyAnnounced": .object(["withToken": count(unsubmitted.charges.withToken.count), "withoutToken": count(unsubmitted.charges.withoutToken.count),
                                      "grantedByToken": count(grantedByToken), "flaggedUnclaimed": count(flaggedUnclaimed)]),
        ])
    }

    var description: String {
        "\(pushed) pushed to the ingest (\(retried) retried after \(refusals.sorted { $0.key < $1.key }.map { "\($0.value) × \($0.key)" }.joined(separator: ", ")), "
            + "\(undelivered) never acknowledged): \(announced.count) submitted purchases announced, "
            + "\(first.count) before their submission, \(announced.count - first.count) once granted, \(duplicated.count) pushed twice; "
            + "\(unsubmitted.charges.withToken.count) charges announced only, with a token, \(unsubmitted.charges.withoutToken.count) without"
    }
}

import Foundation
import PurchaseDomain
import PurchaseStore

/// The books of a run: what the pipeline did — read from its output topics (`PipelineWatcher`), from the store and from
/// the stand-in App Store's finish calls — checked against what was submitted (`PurchaseInput`). The one books
/// checker of the demo, the benchmark and the chaos run.
public struct PipelineBooks: Sendable {
    /// What the run did besides submitting its input.
    public struct Expectations: Sendable {
        /// Valid purchases refunded by a notification after their grant: revoked, their coins taken back.
        public var revoked: Set<TransactionID> = []
        /// Valid purchases revoked after their grant and given back since (a refund reversed, a dispute won): finished, what
        /// they give held again (or never taken back, when the reversal was taken first and made the revocation outdated).
        public var restored: Set<TransactionID> = []
        /// Valid purchases refunded before they were submitted (a REFUND that overtook its purchase): revoked, nothing of
        /// theirs held; granted not at all (their submission answered `revoked`), or once and taken back when their submission
        /// overtook the refund after all (they travel on different topics). For runs without `exactAnswers`, which counts
        /// grant answers only.
        public var refundedFirst: Set<TransactionID> = []
        /// Valid submissions beyond the input's (restores sent later): each answered "already granted".
        public var laterRepeats = 0
        /// Exactly one answer per submission (no worker was killed, so nothing was redelivered after its commit);
        /// else at least one, and a repeat of a purchase revoked or flagged since may be answered with that state.
        public var exactAnswers = false
        /// Charges the store announced that no app submitted: each with a token granted once to its user, each without
        /// one flagged once at its deadline and granted to nobody.
        public var unsubmitted: UnsubmittedCharges?

        public init(revoked: Set<TransactionID> = [], restored: Set<TransactionID> = [], refundedFirst: Set<TransactionID> = [], laterRepeats: Int = 0,
                    exactAnswers: Bool = false, unsubmitted: UnsubmittedCharges? = nil) {
            self.revoked = revoked
            self.restored = restored
            self.refundedFirst = refundedFirst
            self.laterRepeats = laterRepeats
            self.exactAnswers = exactAnswers
            self.unsubmitted = unsubmitted
        }
    }

    public let seen: PipelineWatcher.Seen
    /// Valid purchases with exactly one grant in the ledger.
    public var grantedOnce = 0
    /// Valid purchases in the state expected of them.
    public var finished = 0
    public var refundDue = 0
    public var revoked = 0
    /// Purchases given back (`Expectations.restored`) finished.
    public var restored = 0
    /// Purchases refunded before their submission, revoked and granted at most once.
    public var refundedFirst = 0
    /// Subscription periods among the valid purchases (not refunded), those an upgrade ended early, and the subscribers whose
    /// tiers were checked against them.
    public var subscriptionPeriods = 0
    public var periodsEndedByUpgrade = 0
    public var subscribersChecked = 0
    /// Charges nobody submitted, by store: granted to the user their account token names, and flagged unclaimed at their
    /// deadline.
    public var chargesGrantedByToken: [Store: Int] = [:]
    public var chargesFlaggedUnclaimed: [Store: Int] = [:]
    /// Charges the store refunded without a notification: revoked when the sweeper asked before flagging them.
    public var chargesRevokedBeforeFlagging = 0
    /// Forgeries rejected, malformed messages dead-lettered.
    public var rejected = 0
    public var deadLettered = 0
    /// Trapping messages dead-lettered `crashedWorker`.
    public var crashedWorker = 0
    /// Finish Transaction calls the stand-in App Store received, and how many repeated an earlier one (after a kill).
    public var finishCalls = 0
    public var repeatedFinishCalls = 0
    /// Each kind of violation with its count and a few examples; empty when the books balance.
    public var violations: [String] = []

    /// Checks the books of `input` in `store`, as `seen` and the stand-in's `finishCalls` (transaction id → call times;
    /// nil: the finisher called no API) saw them.
    public static func check(input: PurchaseInput, expectations: Expectations = .init(), seen: PipelineWatcher.Seen, store: SQLPurchaseStore,
                             finishCalls: [TransactionID: [Date]]? = nil) async throws -> PipelineBooks {
        let audit = try await store.audit()
        var books = PipelineBooks(seen: seen)
        var problems: [String: [String]] = [:]
        func violation(_ kind: String, _ example: some CustomStringConvertible) { problems[kind, default: []].append(example.description) }
        func record(_ key: PurchaseKey) -> StoreAudit.Purchase? { audit.purchases[key] }
        func record(_ id: TransactionID) -> StoreAudit.Purchase? { record(PurchaseKey(store: .appstore, transactionId: id)) }

        // Every valid purchase granted exactly once (one refunded before its submission at most once), and in the state its
        // story ends in.
        var expectedCoins: [UserID: Int64] = [:]
        var expectedEntitlements: [UserID: Set<ItemCode>] = [:]
        var subscriptionPeriods: [PurchaseInput.Purchase] = []
        for purchase in input.unique {
            let refundedFirst = expectations.refundedFirst.contains(purchase.transactionId)
            switch (record(purchase.key)?.grantEntries ?? 0, refundedFirst) {
            case (0...1, true): break // counted below, once its state is right
            case (1, false): books.grantedOnce += 1
            case (0, false): violation("valid purchases not granted", purchase.transactionId)
            default: violation("valid purchases granted more than once", purchase.transactionId)
            }
            if seen.grantedTransactions.contains(purchase.transactionId) == false {
                if !refundedFirst { violation("valid purchases without an item.granted", purchase.transactionId) }
                else if seen.rejectedTransactions[purchase.transactionId]?.contains("revoked") != true {
                    violation("purchases refunded first answered neither granted nor revoked", purchase.transactionId)
                }
            }
            let expected: PurchaseState = expectations.revoked.contains(purchase.transactionId) || refundedFirst ? .revoked
                : purchase.isFlaggedAtDeadline ? .refundDue : .finished
            // What it leaves the user, whatever state the store holds it in (a wrong state is its own violation).
            if expected != .revoked {
                expectedCoins[purchase.user, default: 0] += purchase.coins
                if let entitlement = purchase.product.entitlement {
                    if purchase.product.isSubscription { subscriptionPeriods.append(purchase) } else { expectedEntitlements[purchase.user, default: []].insert(entitlement) }
                }
            }
            let state = record(purchase.key)?.state
            guard state == expected else {
                violation("valid purchases not \(expected.rawValue)", "\(purchase.transactionId) (\(state?.rawValue ?? "not recorded"))")
                continue
            }
            switch expected {
            case .finished:
                if seen.finished[purchase.transactionId] == nil { violation("purchases finished without a transaction.finished event", purchase.transactionId) }
                books.finished += 1
                if expectations.restored.contains(purchase.transactionId) { books.restored += 1 }
            case .refundDue:
                if seen.refundDue[purchase.transactionId]?.count != 1 { violation("stale purchases not flagged exactly once", purchase.transactionId) }
                books.refundDue += 1
            default: if refundedFirst { books.refundedFirst += 1 } else { books.revoked += 1 }
            }
        }
        // Charges nobody submitted: one with a token is its user's, once (the balances below say whose); one without is
        // flagged, once.
        for (charge, _) in expectations.unsubmitted?.withToken ?? [] {
            let held = record(charge.key)
            guard held?.grantEntries == 1, held?.state == .finished, seen.grantedTransactions.contains(charge.transactionId) else {
                violation("charges with a known account token not granted once", "\(charge.transactionId) (\(held?.state.rawValue ?? "not recorded"), "
                          + "\(held?.grantEntries ?? 0) grants)")
                continue
            }
            expectedCoins[charge.user, default: 0] += charge.coins
            books.chargesGrantedByToken[charge.store, default: 0] += 1
        }
        // Refunded at the store with no notification sent: the sweeper asked before flagging, and revoked it instead.
        for (charge, _) in expectations.unsubmitted?.refundedUnannounced ?? [] {
            let held = record(charge.key)
            guard held?.state == .revoked, held?.grantEntries == 0, seen.refundDue[charge.transactionId] == nil else {
                violation("charges the store refunded unannounced not revoked (or flagged)", "\(charge.transactionId) (\(held?.state.rawValue ?? "not recorded"), "
                          + "\(seen.refundDue[charge.transactionId]?.count ?? 0) refund.due)")
                continue
            }
            books.chargesRevokedBeforeFlagging += 1
        }
        let unclaimed = Set((expectations.unsubmitted?.withoutToken ?? []).map(\.transactionId))
        for charge in expectations.unsubmitted?.withoutToken ?? [] {
            let held = record(charge.key)
            guard held?.state == .refundDue, held?.grantEntries == 0, seen.refundDue[charge.transactionId]?.count == 1 else {
                violation("charges nobody claimed not flagged exactly once", "\(charge.transactionId) (\(held?.state.rawValue ?? "not recorded"), "
                          + "\(held?.grantEntries ?? 0) grants, \(seen.refundDue[charge.transactionId]?.count ?? 0) refund.due)")
                continue
            }
            books.chargesFlaggedUnclaimed[charge.store, default: 0] += 1
        }
        for (id, events) in seen.refundDue where !unclaimed.contains(id) && !input.unique.contains(where: { $0.transactionId == id && $0.isFlaggedAtDeadline }) {
            violation("purchases flagged refund-due that were not left unconsumed", "\(id) (\(events.count) events)")
        }
        for (key, purchase) in audit.purchases where Lifecycle.openStates.contains(purchase.state) {
            violation("purchases neither finished nor flagged", "\(key) (\(purchase.state.rawValue))")
        }
        // Each balance is the sum of its purchases (against the input) and of its ledger entries (against the store).
        for user in Set(input.unique.map(\.user)).sorted() {
            let balance = try await store.balances(of: user)["coins"] ?? 0
            if balance != expectedCoins[user, default: 0] { violation("balances not the sum of their purchases", "\(user): \(balance), expected \(expectedCoins[user, default: 0])") }
        }
        // Entitlements for good (ad-free): held by each buyer, and no longer by one whose only purchase of it was refunded.
        let forGood = input.unique.filter { $0.product.entitlement != nil && !$0.product.isSubscription }
        let namesForGood = Set(forGood.compactMap(\.product.entitlement))
        for user in Set(forGood.map(\.user)).sorted() {
            let held = Set(try await store.entitlements(of: user).keys).intersection(namesForGood)
            let entitlements = expectedEntitlements[user, default: []]
            if !entitlements.isSubset(of: held) { violation("entitlements bought but not held", "\(user): \(entitlements.subtracting(held).sorted())") }
            if !held.isSubset(of: entitlements) { violation("entitlements held after their purchase was refunded", "\(user): \(held.subtracting(entitlements).sorted())") }
        }
        for (kind, example) in try await books.checkSubscriptions(subscriptionPeriods, of: input, store: store) { violation(kind, example) }
        for mismatch in audit.balanceMismatches { violation("balances not the sum of their ledger entries", mismatch) }
        for key in audit.orphanGrants { violation("grants of purchases not in the store", key.description) }

        // Every forgery rejected as such, nothing granted for it; every malformed message dead-lettered.
        for (submissionId, id) in input.forged {
            if seen.rejected[submissionId]?.contains("untrustedChain") == true { books.rejected += 1 } else { violation("forged purchases not rejected (untrustedChain)", id) }
            if (record(id)?.grantEntries ?? 0) > 0 { violation("forged purchases granted", id) }
        }
        for key in input.malformed {
            if seen.deadLettered[key] != nil { books.deadLettered += 1 } else { violation("malformed messages not dead-lettered", key) }
        }
        // Every trapping message dead-lettered as the message that crashed its worker, and nothing recorded of its purchase.
        for (key, id) in input.trapping {
            if seen.deadLettered[key] == ["crashedWorker"] { books.crashedWorker += 1 } else {
                violation("trapping messages not dead-lettered crashedWorker", "\(key): \(seen.deadLettered[key]?.sorted() ?? [])")
            }
            if record(id) != nil { violation("trapping messages recorded", id) }
        }
        for (key, reasons) in seen.deadLettered where reasons.contains("crashedWorker") && input.trapping[key] == nil {
            violation("messages dead-lettered crashedWorker that trap nothing", key)
        }
        let outcomes = books.grantedOnce + books.refundedFirst + books.rejected + books.deadLettered + books.crashedWorker
        if outcomes != input.outcomesExpected {
            violation("messages without an outcome", "\(input.outcomesExpected - outcomes) of \(input.outcomesExpected) (granted + refunded first + rejected + dead-lettered)")
        }

        // Every submission answered: repeats "already granted"; no rejection but the forgeries' (after a kill, a repeat of a
        // purchase revoked or flagged since is answered with that state: it changes nothing).
        let repeats = input.plan.duplicates + expectations.laterRepeats
        let answers = "\(seen.grantAnswers) granted + \(seen.alreadyGrantedAnswers) already granted"
        if expectations.exactAnswers {
            if seen.grantAnswers != input.unique.count || seen.alreadyGrantedAnswers != repeats {
                violation("submissions not answered once", "\(answers), expected \(input.unique.count) + \(repeats)")
            }
            if seen.deadLetterEvents.count != input.malformed.count + input.trapping.count {
                violation("dead letters not of the malformed and trapping messages", "\(seen.deadLetterEvents.count) for \(input.malformed.count + input.trapping.count)")
            }
        } else if seen.grantAnswers + seen.alreadyGrantedAnswers + seen.revokedAnswers < input.unique.count + repeats {
            violation("submissions not answered", "\(answers) + \(seen.revokedAnswers) revoked, expected at least \(input.unique.count + repeats)")
        }
        let tolerated: Set<String> = expectations.exactAnswers ? [] : ["revoked", "refundDue"]
        for (submissionId, reasons) in seen.rejected where input.forged[submissionId] == nil && !reasons.isSubset(of: tolerated) {
            violation("valid submissions rejected", "\(submissionId): \(reasons.sorted().joined(separator: ", "))")
        }

        // No purchase finished twice: one transaction.finished identity per purchase; none finished without its grant, in
        // the store and at the App Store (no Finish Transaction call before the grant).
        for (id, events) in seen.finished where events.count > 1 { violation("purchases finished twice", "\(id): \(events.count) distinct events") }
        for key in audit.finishedWithoutGrant { violation("purchases finished without a grant", key.description) }
        for (id, calls) in finishCalls ?? [:] {
            books.finishCalls += calls.count
            books.repeatedFinishCalls += calls.count - 1
            guard let purchase = record(id), purchase.grantEntries > 0, let grantedAt = purchase.grantedAt else {
                violation("Finish Transaction called for a purchase never granted", id)
                continue
            }
            // Store times are milliseconds; the call is stamped after the request arrived.
            if let first = calls.min(), first.addingTimeInterval(0.001) < grantedAt { violation("Finish Transaction called before the grant", id) }
        }
        books.violations = problems.keys.sorted().map { kind in
            let examples = problems[kind]!
            return "\(kind): \(examples.count) (e.g. \(examples.sorted().prefix(3).joined(separator: ", ")))"
        }
        return books
    }

    /// What the subscribers hold against what their periods give: each period its tier until its expiry, or until the start of a
    /// later period of another product of its subscription (an upgrade ends the period it replaces then; a renewal or a
    /// downgrade, which begins when the period ends, does not), whichever comes first. A period revoked gives nothing but
    /// still ends the one it replaced. The last `item.granted` of each period gave that end: its grant, when the upgrade came
    /// first; else the upgrade's answer for the period it ended (`ended:…`).
    private mutating func checkSubscriptions(_ periods: [PurchaseInput.Purchase], of input: PurchaseInput,
                                             store: SQLPurchaseStore) async throws -> [(String, String)] {
        let all = input.subscriptions
        // Each period's subscription, by the period's transaction id.
        let subscriptionOf = Dictionary(uniqueKeysWithValues: all.flatMap { periods in periods.map { ($0.transactionId, periods) } })
        func end(of purchase: PurchaseInput.Purchase) -> Date? {
            guard let period = purchase.period else { return nil }
            let upgrades = subscriptionOf[purchase.transactionId, default: []].compactMap { other in
                other.product.id != purchase.product.id ? other.period?.lowerBound : nil
            }
            return upgrades.filter { $0 > period.lowerBound }.reduce(period.upperBound, min)
        }
        var violations: [(String, String)] = []
        let checkedAt = Date()
        var expected: [UserID: [ItemCode: Date]] = [:]
        for purchase in periods {
            guard let tier = purchase.product.entitlement, let end = end(of: purchase) else { continue }
            if end > checkedAt { expected[purchase.user, default: [:]][tier] = max(end, expected[purchase.user]?[tier] ?? end) }
            subscriptionPeriods += 1
            if let period = purchase.period, end < period.upperBound { periodsEndedByUpgrade += 1 }
            let said = seen.lastExpiry[purchase.transactionId]
            if said.map({ abs($0.timeIntervalSince(end)) < 0.002 }) != true {
                violations.append(("subscription periods whose last item.granted does not give their end",
                                   "\(purchase.transactionId): \(said.map { "\($0)" } ?? "no expiry"), ends \(end)"))
            }
        }
        let tiers = Set(all.joined().compactMap(\.product.entitlement))
        func described(_ held: [ItemCode: Date]) -> String { held.isEmpty ? "none" : held.sorted { $0.key < $1.key }.map { "\($0.key) until \($0.value)" }.joined(separator: ", ") }
        for user in Set(periods.map(\.user)).sorted() {
            subscribersChecked += 1
            var held: [ItemCode: Date] = [:]
            for (tier, until) in try await store.entitlements(of: user, at: checkedAt) where tiers.contains(tier) { held[tier] = until ?? .distantFuture }
            let wanted = expected[user] ?? [:]
            let same = held.count == wanted.count && wanted.allSatisfy { tier, end in held[tier].map { abs($0.timeIntervalSince(end)) < 0.002 } ?? false }
            if !same { violations.append(("subscription tiers not held as their periods give", "\(user): \(described(held)); expected \(described(wanted))")) }
        }
        return violations
    }
}

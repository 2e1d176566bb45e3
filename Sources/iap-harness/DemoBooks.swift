import Foundation
import JSON
import PurchaseStore

/// The demo's books: what the pipeline did, checked against what was generated.
struct DemoBooks {
    var finished = 0
    var refundDue = 0
    var revoked = 0
    var stillOpen = 0
    var counts: DemoWatcher.Counts
    var violations: [String] = []

    static func check(plan: DemoCommand.Plan, store: SQLPurchaseStore, counts: DemoWatcher.Counts, killed: Bool) async throws -> DemoBooks {
        let statistics = try await store.statistics()
        var books = DemoBooks(counts: counts)
        books.finished = statistics.purchasesByState[.finished] ?? 0
        books.refundDue = statistics.purchasesByState[.refundDue] ?? 0
        books.revoked = statistics.purchasesByState[.revoked] ?? 0
        books.stillOpen = (statistics.purchasesByState[.verified] ?? 0) + (statistics.purchasesByState[.granted] ?? 0)
        func expect(_ condition: Bool, _ text: String) { if !condition { books.violations.append(text) } }
        expect(counts.grantedTransactions.count == plan.unique,
               "\(counts.grantedTransactions.count) purchases granted, expected \(plan.unique) (each valid unique purchase)")
        if killed {
            // After SIGKILL, redelivered inputs are answered again: a first grant may surface as "already granted".
            expect(counts.granted + counts.alreadyGranted >= plan.unique + plan.duplicates + plan.restores,
                   "\(counts.granted + counts.alreadyGranted) grant answers, expected at least \(plan.unique + plan.duplicates + plan.restores)")
        } else {
            expect(counts.granted == plan.unique, "granted \(counts.granted), expected \(plan.unique) (each valid unique purchase once)")
            expect(counts.alreadyGranted == plan.duplicates + plan.restores,
                   "already granted \(counts.alreadyGranted), expected \(plan.duplicates + plan.restores) (duplicates + restores)")
        }
        if killed {
            // A redelivered purchase.verified of a purchase refunded or flagged since its grant is answered with its
            // state (revoked, refundDue): it changes nothing, and is not a forgery.
            let others = counts.rejectedByReason.filter { $0.key != "untrustedChain" && $0.key != "revoked" && $0.key != "refundDue" }
            expect(counts.rejectedByReason["untrustedChain"] == plan.forged && others.isEmpty,
                   "rejected \(counts.rejectedByReason), expected \(plan.forged) untrustedChain (the forgeries), and else only repeats answered revoked or refundDue")
        } else {
            expect(counts.rejected == plan.forged && counts.rejectedByReason["untrustedChain"] == plan.forged,
                   "rejected \(counts.rejectedByReason), expected \(plan.forged) untrustedChain (the forgeries)")
        }
        expect(counts.deadLettered == plan.malformed, "dead-lettered \(counts.deadLettered), expected \(plan.malformed)")
        expect(books.finished == plan.consumed - 1, "finished \(books.finished), expected \(plan.consumed - 1) (consumed, less the refunded one)")
        expect(books.revoked == 1, "revoked \(books.revoked), expected 1 (the REFUND notification)")
        expect(books.refundDue == plan.stale && counts.refundDueEvents == plan.stale,
               "refund due \(books.refundDue) (events \(counts.refundDueEvents)), expected \(plan.stale) (left unconsumed > 24 h)")
        expect(books.stillOpen == 0, "\(books.stillOpen) purchases neither finished nor flagged")
        // Every user's balance is checked at the end, read back as apps read it (`DemoPurchases.expectedHoldings`).
        return books
    }

    func summary(plan: DemoCommand.Plan, seconds: TimeInterval, kills: Int) -> JSONValue {
        .object([
            "workersKilled": .integer(Int64(kills)),
            "submitted": .integer(Int64(plan.total)), "uniqueValid": .integer(Int64(plan.unique)), "verified": .integer(Int64(plan.unique)),
            "rejected": .integer(Int64(counts.rejected)),
            "rejectedByReason": .object(counts.rejectedByReason.mapValues { .integer(Int64($0)) }),
            "granted": .integer(Int64(counts.granted)), "alreadyGranted": .integer(Int64(counts.alreadyGranted)),
            "finished": .integer(Int64(finished)), "refundDue": .integer(Int64(refundDue)), "revoked": .integer(Int64(revoked)),
            "deadLettered": .integer(Int64(counts.deadLettered)), "seconds": .number((seconds * 10).rounded() / 10),
            "submissionsPerSecond": .number((Double(plan.total) / seconds).rounded()),
            "violations": .array(violations.map(JSONValue.string)),
        ])
    }

    func table(plan: DemoCommand.Plan, seconds: TimeInterval) -> String {
        let rows: [(String, String)] = [
            ("submitted", "\(plan.total)"), ("unique valid purchases", "\(plan.unique)"),
            ("rejected", "\(counts.rejected) " + counts.rejectedByReason.map { "\($0.key): \($0.value)" }.sorted().joined(separator: ", ")),
            ("granted", "\(counts.granted)"), ("already granted (duplicates, restores)", "\(counts.alreadyGranted)"),
            ("finished", "\(finished)"), ("refund due (unconsumed > 24 h)", "\(refundDue)"), ("revoked (REFUND)", "\(revoked)"),
            ("dead-lettered", "\(counts.deadLettered)"),
            ("time", String(format: "%.1f s (%.0f submissions/s)", seconds, Double(plan.total) / seconds)),
        ]
        var text = rows.map { "  \($0.0.padding(toLength: 40, withPad: " ", startingAt: 0)) \($0.1)" }.joined(separator: "\n")
        text += violations.isEmpty ? "\n\nbooks balance: every valid unique purchase granted exactly once, everything else accounted for."
                                   : "\n\nBOOKS DO NOT BALANCE:\n" + violations.map { "  - \($0)" }.joined(separator: "\n")
        return text
    }
}

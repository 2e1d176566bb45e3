import Foundation
import JSON
import PipelineHarness

/// The demo's report of its books (`PipelineBooks`).
extension PipelineBooks {
    func demoSummary(plan: DemoCommand.Plan, seconds: TimeInterval, kills: Int) -> JSONValue {
        .object([
            "workersKilled": .integer(Int64(kills)),
            "submitted": .integer(Int64(plan.total)), "uniqueValid": .integer(Int64(plan.unique)), "verified": .integer(Int64(plan.unique)),
            "rejected": .integer(Int64(seen.rejectionCount)),
            "rejectedByReason": .object(seen.rejectionsByReason.mapValues { .integer(Int64($0.count)) }),
            "granted": .integer(Int64(seen.grantAnswers)), "alreadyGranted": .integer(Int64(seen.alreadyGrantedAnswers)),
            "finished": .integer(Int64(finished)), "refundDue": .integer(Int64(refundDue)), "revoked": .integer(Int64(revoked)),
            "deadLettered": .integer(Int64(seen.deadLetterEvents.count)), "seconds": .number((seconds * 10).rounded() / 10),
            "submissionsPerSecond": .number((Double(plan.total) / seconds).rounded()),
            "violations": .array(violations.map(JSONValue.string)),
        ])
    }

    func demoTable(plan: DemoCommand.Plan, seconds: TimeInterval) -> String {
        let rows: [(String, String)] = [
            ("submitted", "\(plan.total)"), ("unique valid purchases", "\(plan.unique)"),
            ("rejected", "\(seen.rejectionCount) " + seen.rejectionsByReason.map { "\($0.key): \($0.value.count)" }.sorted().joined(separator: ", ")),
            ("granted", "\(seen.grantAnswers)"), ("already granted (duplicates, restores)", "\(seen.alreadyGrantedAnswers)"),
            ("finished", "\(finished)"), ("refund due (unconsumed > 24 h)", "\(refundDue)"), ("revoked (REFUND)", "\(revoked)"),
            ("dead-lettered", "\(seen.deadLetterEvents.count)"),
            ("time", String(format: "%.1f s (%.0f submissions/s)", seconds, Double(plan.total) / seconds)),
        ]
        var text = rows.map { "  \($0.0.padding(toLength: 40, withPad: " ", startingAt: 0)) \($0.1)" }.joined(separator: "\n")
        text += violations.isEmpty ? "\n\nbooks balance: every valid unique purchase granted exactly once, everything else accounted for."
                                   : "\n\nBOOKS DO NOT BALANCE:\n" + violations.map { "  - \($0)" }.joined(separator: "\n")
        return text
    }
}

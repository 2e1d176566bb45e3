import Foundation
import JSON
import PipelineHarness

/// The chaos run's report of its books (`PipelineBooks`), its faults and its time.
extension PipelineBooks {
    func chaosSummary(input: PurchaseInput, plan: ChaosPlan, refunds: RefundPlan, seconds: TimeInterval) -> JSONValue {
        .object([
            "submitted": .integer(Int64(input.messages.count)), "uniqueValid": .integer(Int64(input.unique.count)),
            "duplicates": .integer(Int64(input.plan.duplicates)), "forged": .integer(Int64(input.forged.count)),
            "malformed": .integer(Int64(input.malformed.count)), "trapping": .integer(Int64(input.trapping.count)),
            "crashedWorker": .integer(Int64(crashedWorker)),
            "grantedOnce": .integer(Int64(grantedOnce)), "finished": .integer(Int64(finished)), "rejected": .integer(Int64(rejected)),
            "deadLettered": .integer(Int64(deadLettered)), "refunded": .integer(Int64(refunds.refunded.count)), "refundsReversed": .integer(Int64(refunds.reversed.count)),
            "revoked": .integer(Int64(revoked)), "restored": .integer(Int64(restored)),
            "refundedFirst": .integer(Int64(refunds.first.count)), "revokedFirst": .integer(Int64(refundedFirst)),
            "subscriptionPeriods": .integer(Int64(subscriptionPeriods)), "periodsEndedByUpgrade": .integer(Int64(periodsEndedByUpgrade)),
            "subscribersChecked": .integer(Int64(subscribersChecked)),
            "grantAnswers": .integer(Int64(seen.grantAnswers)), "alreadyGrantedAnswers": .integer(Int64(seen.alreadyGrantedAnswers)),
            "outputRecords": .integer(Int64(seen.records)),
            "finishTransactionCalls": .integer(Int64(finishCalls)), "repeatedFinishTransactionCalls": .integer(Int64(repeatedFinishCalls)),
            "kills": .object(plan.killed.mapValues { .integer(Int64($0)) }), "restarts": .integer(Int64(plan.killed.values.reduce(0, +))),
            "storeOutageSeconds": .integer(Int64(plan.outageStarted ? plan.outageSeconds : 0)),
            "seconds": .number((seconds * 10).rounded() / 10),
            "violations": .array(violations.map(JSONValue.string)),
        ])
    }

    func chaosTable(input: PurchaseInput, plan: ChaosPlan, refunds: RefundPlan, web: StripeDecisionPlan, seconds: TimeInterval) -> String {
        let rows: [(String, String)] = [
            ("submitted", "\(input.messages.count)"),
            ("unique valid → granted once, finished", "\(input.unique.count) → \(grantedOnce), \(finished)"),
            ("of them subscription periods", "\(subscriptionPeriods) (\(periodsEndedByUpgrade) ended early by an upgrade); \(subscribersChecked) subscribers' tiers checked"),
            ("duplicates", "\(input.plan.duplicates) (grant answers \(seen.grantAnswers), already granted \(seen.alreadyGrantedAnswers))"),
            ("refunded after finish → revoked", "\(refunds.refunded.count) App Store (\(refunds.reversed.count) reversed), \(web.refunded.count) Stripe, "
                + "\(web.disputesLost.count + web.disputesWon.count) Stripe disputes (\(web.disputesWon.count) won) → \(revoked); \(restored) given back, finished"),
            ("refunded before submission → revoked", "\(refunds.first.count) → \(refundedFirst)"),
            ("forged → rejected", "\(input.forged.count) → \(rejected)"),
            ("malformed → dead-lettered", "\(input.malformed.count) → \(deadLettered)"),
            ("trapping the verifier → crashedWorker", "\(input.trapping.count) → \(crashedWorker)"),
            ("Finish Transaction calls", "\(finishCalls) (\(repeatedFinishCalls) repeated after a kill)"),
            ("kills (SIGKILL) and restarts", plan.killed.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")),
            ("store outage", plan.outageStarted ? "\(plan.outageSeconds) s" : "none"),
            ("time", String(format: "%.0f s (%.0f messages/s)", seconds, Double(input.messages.count) / seconds)),
        ]
        var text = rows.map { "  \($0.0.padding(toLength: 40, withPad: " ", startingAt: 0)) \($0.1)" }.joined(separator: "\n")
        text += violations.isEmpty ? "\n\nno violation: every valid purchase granted once and finished, everything else accounted for."
                                   : "\n\nVIOLATIONS:\n" + violations.map { "  - \($0)" }.joined(separator: "\n")
        return text
    }
}

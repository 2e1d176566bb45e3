import Foundation
import PurchaseDomain
import JSON
import PurchaseStore

/// The chaos run's invariants, checked against the generated input, the output topics and the store.
struct ChaosBooks {
    let input: ChaosInput
    let seen: ChaosWatcher.Seen
    var grantedOnce = 0
    var finished = 0
    var rejected = 0
    var deadLettered = 0
    var finishCalls = 0
    var repeatedFinishCalls = 0
    var violations: [String] = []

    static func check(input: ChaosInput, seen: ChaosWatcher.Seen, audit: StoreAudit, balances: [String: Int64],
                      finishCalls: [String: [Date]]) async throws -> ChaosBooks {
        var books = ChaosBooks(input: input, seen: seen)
        var problems: [String: [String]] = [:]
        func violation(_ kind: String, _ example: String) { problems[kind, default: []].append(example) }

        // Every valid unique purchase granted exactly once (one coins item each) and finished.
        for purchase in input.unique {
            let record = audit.purchases[PurchaseKey(store: .appstore, transactionId: purchase.transactionId)]
            switch record?.grantEntries ?? 0 {
            case 1: books.grantedOnce += 1
            case 0: violation("valid purchases not granted", purchase.transactionId)
            default: violation("valid purchases granted more than once", purchase.transactionId)
            }
            if record?.state == .finished && seen.finished[purchase.transactionId] != nil { books.finished += 1 } else {
                violation("valid purchases not finished", "\(purchase.transactionId) (\(record?.state.rawValue ?? "not recorded"))")
            }
        }
        // Each balance is the sum of its grants, against the input and against the ledger.
        var expected: [String: Int64] = [:]
        for purchase in input.unique { expected[purchase.user, default: 0] += purchase.amount }
        for (user, amount) in expected where balances[user] != amount {
            violation("balances not the sum of their purchases", "\(user): \(balances[user] ?? 0), expected \(amount)")
        }
        for mismatch in audit.balanceMismatches { violation("balances not the sum of their ledger entries", mismatch) }
        for key in audit.orphanGrants { violation("grants of purchases not in the store", key.description) }
        // Every forgery rejected, nothing granted for it.
        for (submissionId, id) in input.forged {
            if seen.rejected[submissionId] != nil { books.rejected += 1 } else { violation("forged purchases not rejected", id) }
            if (audit.purchases[PurchaseKey(store: .appstore, transactionId: id)]?.grantEntries ?? 0) > 0 { violation("forged purchases granted", id) }
        }
        // Every malformed message dead-lettered.
        for key in input.malformed {
            if seen.deadLettered[key] != nil { books.deadLettered += 1 } else { violation("malformed messages not dead-lettered", key) }
        }
        // Nothing lost: every message has its outcome; repeats were answered.
        let outcomes = books.grantedOnce + books.rejected + books.deadLettered
        if outcomes != input.outcomesExpected {
            violation("messages without an outcome", "\(input.outcomesExpected - outcomes) of \(input.outcomesExpected) (granted + rejected + dead-lettered)")
        }
        if seen.grantAnswers + seen.alreadyGrantedAnswers < input.unique.count + input.duplicates {
            violation("submissions not answered", "\(seen.grantAnswers + seen.alreadyGrantedAnswers) grant answers for \(input.unique.count + input.duplicates) valid submissions")
        }
        // No purchase finished twice: one transaction.finished event identity per purchase, one finish in the store.
        for (id, events) in seen.finished where events.count > 1 { violation("purchases finished twice", "\(id): \(events.count) distinct events") }
        // No purchase finished without a grant: in the store, and at every Finish Transaction call the store received.
        for key in audit.finishedWithoutGrant { violation("purchases finished without a grant", key.description) }
        for (id, calls) in finishCalls {
            books.finishCalls += calls.count
            books.repeatedFinishCalls += calls.count - 1
            guard let record = audit.purchases[PurchaseKey(store: .appstore, transactionId: id)], record.grantEntries > 0,
                  let grantedAt = record.grantedAt else {
                violation("Finish Transaction called for a purchase never granted", id)
                continue
            }
            // Store times are milliseconds; the call is stamped after the request arrived.
            if let first = calls.min(), first.addingTimeInterval(0.001) < grantedAt {
                violation("Finish Transaction called before the grant", id)
            }
        }
        books.violations = problems.keys.sorted().map { kind in
            let examples = problems[kind]!
            return "\(kind): \(examples.count) (e.g. \(examples.prefix(3).joined(separator: ", ")))"
        }
        return books
    }

    func summary(plan: ChaosPlan, seconds: TimeInterval) -> JSONValue {
        .object([
            "submitted": .integer(Int64(input.messages.count)), "uniqueValid": .integer(Int64(input.unique.count)),
            "duplicates": .integer(Int64(input.duplicates)), "forged": .integer(Int64(input.forged.count)),
            "malformed": .integer(Int64(input.malformed.count)),
            "grantedOnce": .integer(Int64(grantedOnce)), "finished": .integer(Int64(finished)), "rejected": .integer(Int64(rejected)),
            "deadLettered": .integer(Int64(deadLettered)),
            "grantAnswers": .integer(Int64(seen.grantAnswers)), "alreadyGrantedAnswers": .integer(Int64(seen.alreadyGrantedAnswers)),
            "outputRecords": .integer(Int64(seen.records)),
            "finishTransactionCalls": .integer(Int64(finishCalls)), "repeatedFinishTransactionCalls": .integer(Int64(repeatedFinishCalls)),
            "kills": .object(plan.killed.mapValues { .integer(Int64($0)) }), "restarts": .integer(Int64(plan.killed.values.reduce(0, +))),
            "storeOutageSeconds": .integer(Int64(plan.outageStarted ? plan.outageSeconds : 0)),
            "seconds": .number((seconds * 10).rounded() / 10),
            "violations": .array(violations.map(JSONValue.string)),
        ])
    }

    func table(plan: ChaosPlan, seconds: TimeInterval) -> String {
        let rows: [(String, String)] = [
            ("submitted", "\(input.messages.count)"),
            ("unique valid → granted once, finished", "\(input.unique.count) → \(grantedOnce), \(finished)"),
            ("duplicates", "\(input.duplicates) (grant answers \(seen.grantAnswers), already granted \(seen.alreadyGrantedAnswers))"),
            ("forged → rejected", "\(input.forged.count) → \(rejected)"),
            ("malformed → dead-lettered", "\(input.malformed.count) → \(deadLettered)"),
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

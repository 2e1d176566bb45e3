import CommandLineOptions
import Foundation
import JSON
import PurchaseStore

/// `iapctl books --store URL [--password-file F]`: whether the store's books agree with themselves (`StoreAudit`), as one
/// JSON object; exit 1 when they do not. Reads every ledger entry and balance: for an audit (after an erasure, a
/// manual change, a restore from backup), not for a probe.
enum BooksCommand {
    /// How many examples of each disagreement are printed.
    static let examples = 20

    static func run(_ arguments: [String]) async throws -> Int32 {
        let options = try CommandOptions(arguments, valued: ["--store", "--password-file"])
        guard options.positional.isEmpty else { throw UsageError("books: takes no arguments besides --store and --password-file") }
        guard let store = try IAPCtl.store(options) else { throw UsageError("books: --store URL (or IAP_STORE_URL) is required") }
        let audit = try await store.audit(listingPurchases: false)
        func listed(_ items: [String]) -> JSONValue {
            .object(["count": .integer(Int64(items.count)), "examples": .array(items.sorted().prefix(examples).map { .string($0) })])
        }
        let report: JSONValue = .object([
            "balanced": .bool(audit.isBalanced),
            "purchases": .object(Dictionary(uniqueKeysWithValues: audit.purchaseCounts.map { ($0.key.rawValue, .integer(Int64($0.value))) })),
            "balanceMismatches": listed(audit.balanceMismatches),
            "grantsWithoutPurchase": listed(audit.orphanGrants.map(\.description)),
            "adjustmentEntriesWithoutAdjustment": listed(audit.orphanAdjustmentEntries),
            "finishedWithoutGrant": listed(audit.finishedWithoutGrant.map(\.description)),
        ])
        // Codes keyed by their bytes: a `JSONValue.object`, keyed by `String`, would keep one of two spellings of a currency.
        let totals = JSONValue.serializedObject(audit.currencyTotals.map { (name: $0.key.rawValue, value: JSONValue.integer($0.value).serialized) })
        let members = (report.objectValue ?? [:]).map { (name: $0.key, value: $0.value.serialized) } + [(name: "currencyTotals", value: totals)]
        print(String(decoding: JSONValue.serializedObject(members), as: UTF8.self))
        return audit.isBalanced ? 0 : 1
    }
}

import Foundation
import JSON
import PurchaseDomain
import PurchaseStore
import Testing
import TestSupport

/// `iapctl` takes no number the pipeline's arithmetic cannot hold: an adjustment's amount past 10^12 either way (the
/// extremes of a 64-bit integer included) is a usage error naming the bounds, and nothing is published; and `iapctl books`
/// of a store that refused such amounts finds it balanced, its totals integers.
@Suite struct AmountBoundsCommandTests {
    @Test func anAdjustmentPastItsBoundsIsAUsageErrorNamingThem() throws {
        let iapctl = ExecutableProcess.binary("iapctl").path
        // No broker is named that answers: a request that passed the check would fail to publish, not exit 2.
        let common = ["adjust", "--user", "bob", "--id", "x", "--by", "support:ana", "--reason", "ticket", "--brokers", "127.0.0.1:1"]
        for amount in ["-9223372036854775808", "9223372036854775807", "1000000000001", "-1000000000001", "99999999999999999999", "0"] {
            let (status, output) = try runCommand(iapctl, common + ["--currency", "coins=\(amount)"])
            #expect(status == 2, "\(amount): \(output)")
            #expect(output.contains("from -1000000000000 to 1000000000000") && output.contains("coins=\(amount)"), "\(amount): \(output)")
        }
        let (status, output) = try runCommand(iapctl, ["topics", "create", "t", "--partitions", "99999999999", "--brokers", "127.0.0.1:1"])
        #expect(status == 2 && output.contains("--partitions takes a whole number from 1 to 100000"), "\(output)")
    }

    @Test func theBooksOfAStoreThatRefusedOverflowingAmountsBalance() async throws {
        let url = "sqlite:" + FileManager.default.temporaryDirectory.appendingPathComponent("bounds-\(UUID().uuidString).sqlite").path
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        let now = Date()
        func adjust(_ id: AdjustmentID, _ amount: Int64) async throws -> AdjustmentOutcome {
            try await store.adjust(Adjustment(id: id, userId: "bob", requestedBy: "support:ana", reason: "ticket", items: [.currency("coins", amount)]),
                                   takeWhatIsLeft: false, at: now)
        }
        #expect(try await adjust("seed", 100) == .applied(items: [.currency("coins", 100)], balances: ["coins": 100], shortfall: [:]))
        for (id, amount) in [("min", Int64.min), ("max", Int64.max)] {
            guard case .refused(.amountOutOfRange, _) = try await adjust(AdjustmentID(id), amount) else {
                Issue.record("\(id) is refused")
                continue
            }
        }
        let purchase = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "big"), userId: "bob", productId: "coins.huge",
                                      productType: .consumable, quantity: 1, purchaseTime: now)
        _ = try await store.recordVerified(purchase, at: now)
        await #expect(throws: BalanceOutOfRange.self) { _ = try await store.grant(purchase.key, items: [.currency("coins", .max)], at: now) }

        let books = try await VerifyCommandTests.run(["books", "--store", url], input: "")
        #expect(books.status == 0, "\(books.lines)")
        let report = try #require(books.lines.last.flatMap { JSONValue.parse(Array($0.utf8)) }?.objectValue, "\(books.lines)")
        #expect(report["balanced"] == .bool(true) && report["currencyTotals"] == .object(["coins": .integer(100)]), "\(report)")
        let user = try await VerifyCommandTests.run(["user", "bob", "--store", url], input: "")
        #expect(user.lines.last.flatMap { JSONValue.parse(Array($0.utf8)) }?.objectValue?["balances"] == .object(["coins": .integer(100)]), "\(user.lines)")
    }
}

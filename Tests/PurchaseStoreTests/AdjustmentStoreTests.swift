import Database
import Foundation
import PurchaseDomain
@testable import PurchaseStore
import Testing
import TestSupport

/// Adjustments by hand: once per id, refused whole when a take exceeds a balance, reversible once, in the history.
@Suite struct AdjustmentStoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_764_400_000)

    func adjustment(_ id: AdjustmentID, _ items: [GrantItem], reverses: AdjustmentID? = nil, user: UserID = "user-a") -> Adjustment {
        Adjustment(id: id, userId: user, requestedBy: "support:ana", reason: "ticket \(id)", items: items, reverses: reverses)
    }

    @Test(arguments: StoreEngine.available) func anAdjustmentIsAppliedOnceAndAuditedInTheLedger(_ engine: StoreEngine) async throws {
        let store = try await engine.freshStore()
        let give = adjustment("t-1", [.currency("coins", 500), .entitlement("vip", until: Self.t0.addingTimeInterval(86_400))])
        #expect(try await store.adjust(give, takeWhatIsLeft: false, at: Self.t0) == .applied(items: give.items, balances: ["coins": 500], shortfall: [:]))
        #expect(try await store.adjust(give, takeWhatIsLeft: false, at: Self.t0) == .alreadyApplied(items: give.items, balances: ["coins": 500]),
                "a repeated request changes nothing and answers as the first time")
        guard case .refused(.idReused, _) = try await store.adjust(adjustment("t-1", [.currency("coins", 5)]), takeWhatIsLeft: false, at: Self.t0) else {
            Issue.record("an id used again for other items is refused")
            return
        }
        #expect(try await store.balances(of: "user-a") == ["coins": 500])
        #expect(try await store.holdings(of: "user-a", at: Self.t0).entitlements.map(\.entitlement) == ["vip"])

        // A take beyond the balance is refused whole, and leaves no trace: the same id is applied once allowed.
        let take = adjustment("t-2", [.currency("coins", -800), .currency("gems", 10)])
        guard case .refused(.insufficientBalance, let detail) = try await store.adjust(take, takeWhatIsLeft: false, at: Self.t0) else {
            Issue.record("a take beyond the balance is refused")
            return
        }
        #expect(detail.contains("500") && detail.contains("800"), "\(detail)")
        #expect(try await store.balances(of: "user-a") == ["coins": 500], "nothing of the refused adjustment was applied")
        #expect(try await store.adjust(take, takeWhatIsLeft: true, at: Self.t0.addingTimeInterval(1))
                == .applied(items: take.items, balances: ["coins": 0, "gems": 10], shortfall: ["coins": 300]))

        // Reversals: once, of an adjustment that is not itself one.
        #expect(try await store.adjust(adjustment("t-3", [], reverses: "t-1"), takeWhatIsLeft: true, at: Self.t0.addingTimeInterval(2))
                == .applied(items: [.currency("coins", -500), GrantItem(kind: .entitlement, code: "vip", amount: -1)], balances: ["coins": 0],
                            shortfall: ["coins": 500]))
        #expect(try await store.holdings(of: "user-a", at: Self.t0).entitlements.isEmpty, "the reversed adjustment's entitlement ends")
        for (id, reversed, refusal) in [("t-4", "t-1", AdjustmentRefusal.notReversible), ("t-5", "t-3", .notReversible), ("t-6", "t-99", .unknownAdjustment)] {
            guard case .refused(refusal, _) = try await store.adjust(adjustment(AdjustmentID(id), [], reverses: AdjustmentID(reversed)), takeWhatIsLeft: true,
                                                                     at: Self.t0) else {
                Issue.record("reversing \(reversed) is refused \(refusal)")
                continue
            }
        }
        guard case .refused(.notReversible, _) = try await store.adjust(adjustment("t-7", [], reverses: "t-2", user: "user-b"), takeWhatIsLeft: true, at: Self.t0) else {
            Issue.record("another user's adjustment is not reversed")
            return
        }

        // A take's reversal gives back what was taken (500 of the 800 asked), not what was asked.
        #expect(try await store.adjust(adjustment("t-8", [], reverses: "t-2"), takeWhatIsLeft: false, at: Self.t0.addingTimeInterval(3))
                == .applied(items: [.currency("coins", 500), .currency("gems", -10)], balances: ["coins": 500, "gems": 0], shortfall: [:]))
        guard case .refused(.invalidItems, _) = try await store.adjust(adjustment("t-9", [.currency("coins", -400), .currency("coins", -400)]),
                                                                       takeWhatIsLeft: false, at: Self.t0) else {
            Issue.record("a currency twice in one adjustment is refused, not checked twice against one balance")
            return
        }

        // The history names each with who asked and why.
        let adjusted = try await store.history(of: "user-a", limit: 500).events.filter { $0.kind == .adjusted }
        #expect(adjusted.map { "\($0.adjustmentId?.rawValue ?? "?") \($0.item?.code ?? "?") \($0.item?.amount ?? 0)" }.sorted()
                == ["t-1 coins 500", "t-1 vip 1", "t-2 coins -800", "t-2 gems 10", "t-3 coins -500", "t-3 vip -1", "t-8 coins 500", "t-8 gems -10"])
        #expect(adjusted.allSatisfy { $0.requestedBy == "support:ana" && $0.reason == "ticket \($0.adjustmentId?.rawValue ?? "")" })
        #expect(adjusted.first { $0.adjustmentId == "t-2" && $0.item?.code == "coins" }?.item?.shortfall == 300)
    }
}

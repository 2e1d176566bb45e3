import PipelineHarness
import PurchaseDomain
import PurchaseStore

/// When the chaos run refunds purchases: `first` before their submission; then a quarter of `total` at each of 20, 40, 60
/// and 80 % of progress, chosen among those finished by then; at 60 and 80 % it also reverses half of the refunds of the
/// round two before (`REFUND_REVERSED`), long after they were made.
struct RefundPlan {
    private var rounds: [Double] = [0.2, 0.4, 0.6, 0.8]
    private var earlierRounds: [[TransactionID]] = []
    private let perRound: Int
    let first: Set<TransactionID>
    /// Those refunded after their finish, and those of them whose refund was reversed.
    private(set) var refunded = Set<TransactionID>()
    private(set) var reversed = Set<TransactionID>()

    init(total: Int, first: Set<TransactionID>) {
        perRound = total / 4
        self.first = first
    }

    var isComplete: Bool { rounds.isEmpty || perRound == 0 }

    /// The transactions to refund now, from those `finished` (read only when a round is due; none refunded before), and the
    /// refunds to reverse.
    mutating func due(at progress: Double, finished: () -> Set<TransactionID>) -> (refunds: [TransactionID], reversals: [TransactionID]) {
        guard perRound > 0, let round = rounds.first, round <= progress else { return ([], []) }
        rounds.removeFirst()
        let chosen = Array(finished().subtracting(refunded).shuffled().prefix(perRound))
        refunded.formUnion(chosen)
        earlierRounds.append(chosen)
        let reversals = earlierRounds.count > 2 ? Array(earlierRounds[earlierRounds.count - 3].prefix(perRound / 2)) : []
        reversed.formUnion(reversals)
        return (chosen, reversals)
    }

    /// Whether each purchase refunded first had its submission answered (granted, or rejected as revoked), as `seen`: its
    /// revocation shows in the store before that answer is published.
    func firstAnswered(_ seen: PipelineWatcher.Seen) -> Bool {
        first.allSatisfy { seen.grantedTransactions.contains($0) || seen.rejectedTransactions[$0] != nil }
    }

    /// Whether `store` holds each refunded purchase revoked, and each reversed one finished again.
    func settled(in store: SQLPurchaseStore) async throws -> Bool {
        for id in first.union(refunded) {
            let state = try await store.purchase(PurchaseKey(store: .appstore, transactionId: id))?.state
            guard state == (reversed.contains(id) ? .finished : .revoked) else { return false }
        }
        return true
    }
}

import Foundation
import PurchaseDomain
import PurchaseStore
import StoreFixtures
import Testing
import TestSupport

/// Support's "I paid and got nothing", through the broker and the workers' stages: what the verifier and the granter
/// refused is in the user's history with its reason, once however often its message comes, and a refused submission's
/// claimed transaction id stands in the way of no later purchase of it.
extension PipelineTests {
    @Test(arguments: StoreEngine.available)
    func refusedSubmissionsAreInTheUsersHistoryWithTheirReasonAndBlockNoLaterPurchase(_ engine: StoreEngine) async throws {
        let servers = try TestServices.requireBrokers()
        let pki = try TestPKI.make()
        let pipeline = try await Self.start(servers: servers, pki: pki, storeURL: try await engine.freshURL())
        let signer = JWSSigner(pki: pki)
        let (owner, other) = (UUID().uuidString.lowercased(), UUID().uuidString.lowercased())
        func signed(_ id: String, product: String = "coins.100", bundle: String = Self.bundle, by signer: JWSSigner = signer,
                    token: String? = nil) throws -> String {
            try signer.sign(AppStorePayloads.transaction(transactionId: id, productId: product, bundleId: bundle, appAccountToken: token))
        }
        // The user's purchase, one signed for another app (the verifier refuses it), and a product the catalog does not know
        // (the granter refuses it); someone else's forgery of a transaction id not bought yet, and a replay, under their
        // own account token, of a transaction bound to another's.
        let otherApp = try submission(pipeline, try signed("8300002", bundle: "com.example.other"), user: "user-paid")
        try await send([
            try submission(pipeline, try signed("8300001"), user: "user-paid"), otherApp,
            try submission(pipeline, try signed("8300003", product: "no.such.product"), user: "user-paid"),
            try submission(pipeline, try signed("8300004", by: JWSSigner(pki: try TestPKI.make(name: "forger"))), user: "attacker"),
            try submission(pipeline, try signed("8300005", token: owner), user: "attacker", token: AccountToken(other)),
        ], servers: servers)
        try await waitUntil("the purchase finished, the others refused", timeout: .seconds(60)) {
            try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: "8300001"))?.state == .finished
                && pipeline.runners[0].counters.withLock { $0["handled"] ?? 0 } == 5
                && pipeline.runners[1].counters.withLock { $0["handled"] ?? 0 } == 2
        }
        // The refused submission again (a client retrying it, a redelivery): answered again, kept once.
        try await send([otherApp], servers: servers)
        try await waitUntil("the repeat is answered") { pipeline.runners[0].counters.withLock { $0["handled"] ?? 0 } == 6 }
        // The real purchases of the ids the attacker's submissions named.
        try await send([try submission(pipeline, try signed("8300004"), user: "user-later"),
                        try submission(pipeline, try signed("8300005", token: owner), user: "user-later", token: AccountToken(owner))], servers: servers)
        try await waitUntil("the later purchases finished", timeout: .seconds(60)) {
            try await pipeline.store.statistics().purchasesByState[.finished] == 3
        }
        try await pipeline.stop()

        let history = try await pipeline.store.history(of: "user-paid", limit: 500).events
        let refused = history.filter { $0.kind == .rejected }.map { event in
            [event.store?.rawValue, event.transactionId?.rawValue, event.productId?.rawValue, event.reason].map { $0 ?? "-" }.joined(separator: " ")
        }
        #expect(refused.sorted() == ["appstore - - wrongBundleId", "appstore 8300003 no.such.product unknownProduct"], "each once, with its reason")
        #expect(Set(history.filter { $0.transactionId == "8300001" }.map(\.kind)) == [.purchased, .verified, .granted, .itemGranted, .finished])
        #expect(try await pipeline.store.balances(of: "user-paid") == ["coins": 100], "paid for two, got one: the history says why")

        let attacker = try await pipeline.store.history(of: "attacker", limit: 500).events
        #expect(attacker.allSatisfy { $0.kind == .rejected } && attacker.count == 2, "\(attacker)")
        #expect(attacker.contains { $0.reason == "appAccountTokenMismatch" && $0.transactionId == "8300005" && $0.productId == "coins.100" })
        #expect(attacker.contains { $0.transactionId == nil && $0.reason != nil }, "the forgery, refused before its ids were trusted")
        for id: TransactionID in ["8300004", "8300005"] {
            let purchase = try await pipeline.store.purchase(PurchaseKey(store: .appstore, transactionId: id))
            #expect(purchase?.state == .finished && purchase?.userId == "user-later", "\(id)")
        }
        #expect(try await pipeline.store.balances(of: "user-later") == ["coins": 200])
        #expect(try await pipeline.store.balances(of: "attacker").isEmpty)
    }
}

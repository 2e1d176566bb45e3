import PurchaseDomain
import Crypto
import Foundation
import HTTPServer
import JSON
import StoreFixtures
import StoreVerification
import Synchronization
import Testing

/// Get Transaction Info, Get Transaction History, Get Refund History and Get All Subscription Statuses, the client against
/// the stand-in over HTTP: the transactions come back as the App Store signed them, page by page.
@Suite struct TransactionHistoryTests {
    typealias Failure = AppStoreServerAPIClient.Failure

    /// A client signing its tokens with a fresh key, and a stand-in checking them against `standInKey` (the client's key when nil).
    static func standInAndClient(standInKey: PrivateKey? = nil) throws -> (AppStoreServerAPIStandIn, AppStoreServerAPIClient) {
        let key = try PrivateKey.generateP256()
        let appStore = try AppStoreServerAPIClientTests.standIn(publicKey: try (standInKey ?? key).publicKey())
        return (appStore, client(appStore.baseURL, key: key))
    }

    static func client(_ baseURL: URL, key: PrivateKey) -> AppStoreServerAPIClient {
        AppStoreServerAPIClient(configuration: .init(baseURL: baseURL, keyId: "KEY123", issuerId: "issuer-uuid",
                                                     bundleId: BundleID(bundleId), privateKey: key))
    }

    /// A transaction signed with the test PKI, as the App Store signs it.
    static func signed(_ id: String, original: String? = nil, refunded: Bool = false) throws -> String {
        try signedTransaction(sharedPKI, AppStorePayloads.transaction(transactionId: id, originalTransactionId: original, productId: "coins.100",
                                                                      bundleId: bundleId, revocationDate: refunded ? Date() : nil))
    }

    static func failure<T>(_ result: Result<T, Failure>) -> Failure? { if case .failure(let failure) = result { failure } else { nil } }

    /// Every page of a history from the first, each asked with the revision of the one before (at most 10 pages).
    static func allPages(_ page: (String?) async -> Result<SignedTransactionsPage, Failure>) async throws -> [[String]] {
        var pages: [[String]] = []
        var revision: String?
        repeat {
            let answer = try await page(revision).get()
            pages.append(answer.signedTransactions)
            revision = answer.revision
        } while revision != nil && pages.count < 10
        return pages
    }

    @Test func transactionInfoAnswersTheSignedTransactionAndRefusesAnUnknownOrInvalidId() async throws {
        let (appStore, client) = try Self.standInAndClient()
        let jws = try Self.signed("2000000000000101")
        appStore.recordTransaction(jws, transactionId: "2000000000000101", originalTransactionId: "2000000000000101", customer: "alice")

        let answered = try await client.transactionInfo("2000000000000101").get()
        #expect(answered == jws)
        let transaction = try #require(try verifier().verifyTransaction(answered).value, "the answer verifies as the App Store's")
        #expect(transaction.transactionId == "2000000000000101")

        #expect(Self.failure(await client.transactionInfo("2000000000000999")) == .refused(status: 404, detail: "Transaction id not found. (errorCode 4040010)"))
        #expect(Self.failure(await client.transactionInfo("abc123")) == .refused(status: 400, detail: "Invalid transaction id. (errorCode 4000006)"))
        #expect(Self.failure(await client.transactionInfo("not/an/id")) == .refused(status: 0, detail: "invalid transaction id"))
        #expect(appStore.requests == ["GET /inApps/v1/transactions/2000000000000101", "GET /inApps/v1/transactions/2000000000000999",
                                      "GET /inApps/v1/transactions/abc123"], "an id that cannot be sent is refused without a request")
    }

    /// Five transactions of one customer (one replaced by its refunded version), one of another, two a page: three pages
    /// hold the customer's five, each once, oldest first; newest first when asked.
    @Test func historyPagesThroughEveryTransactionOfTheCustomerOnceInOrder() async throws {
        let (appStore, client) = try Self.standInAndClient()
        appStore.setTransactionPageSize(2)
        let ids = (1...5).map { "200000000000020\($0)" }
        var expected: [String] = []
        for (index, id) in ids.enumerated() {
            let jws = try Self.signed(id)
            appStore.recordTransaction(jws, transactionId: TransactionID(id), originalTransactionId: TransactionID(id), customer: "alice")
            expected.append(jws)
            if index == 1 {
                appStore.recordTransaction(try Self.signed("2000000000000300"), transactionId: "2000000000000300",
                                           originalTransactionId: "2000000000000300", customer: "bob")
            }
        }
        let refunded = try Self.signed(ids[2], refunded: true)
        appStore.recordTransaction(refunded, transactionId: TransactionID(ids[2]), originalTransactionId: TransactionID(ids[2]), customer: "alice",
                                   refunded: true)
        expected[2] = refunded

        let pages = try await Self.allPages { await client.transactionHistory(of: TransactionID(ids[3]), revision: $0) }
        #expect(pages.map(\.count) == [2, 2, 1])
        #expect(pages.flatMap { $0 } == expected, "every transaction of the customer once, oldest first, the refunded version in its place")
        let verified = try pages.flatMap { $0 }.map { try #require(try verifier().verifyTransaction($0).value) }
        #expect(verified.map(\.transactionId.rawValue) == ids)
        #expect(verified[2].revocationDate != nil)

        let newestFirst = try await Self.allPages { await client.transactionHistory(of: TransactionID(ids[0]), revision: $0, order: .descending) }
        #expect(newestFirst.flatMap { $0 } == expected.reversed())
        let bobs = try await Self.allPages { await client.transactionHistory(of: "2000000000000300", revision: $0) }
        #expect(bobs.count == 1 && bobs[0].count == 1 && !expected.contains(bobs[0][0]))
    }

    @Test func aRevisionTheAppStoreNeverGaveIsRefused() async throws {
        let (appStore, client) = try Self.standInAndClient()
        appStore.setTransactionPageSize(1)
        for (id, customer) in [("2000000000000401", "alice"), ("2000000000000402", "alice"), ("2000000000000403", "bob"), ("2000000000000404", "bob")] {
            appStore.recordTransaction(try Self.signed(id), transactionId: TransactionID(id), originalTransactionId: TransactionID(id),
                                       customer: customer, refunded: true)
        }
        let refused = Failure.refused(status: 400, detail: "Invalid request revision. (errorCode 4000005)")
        #expect(Self.failure(await client.transactionHistory(of: "2000000000000401", revision: "made+up/revision==")) == refused)
        let bobsRevision = try #require(try await client.transactionHistory(of: "2000000000000403").get().revision)
        #expect(Self.failure(await client.transactionHistory(of: "2000000000000401", revision: bobsRevision)) == refused,
                "another customer's revision")
        #expect(Self.failure(await client.refundHistory(of: "2000000000000403", revision: bobsRevision)) == refused,
                "a transaction history revision for refund history")
        let next = try await client.transactionHistory(of: "2000000000000404", revision: bobsRevision).get()
        #expect(next.signedTransactions.count == 1 && next.revision == nil, "the revision given still names bob's second page")
    }

    /// Refund history lists the customer's refunded transactions only, in the order they were refunded, page by page.
    @Test func refundHistoryListsOnlyTheCustomersRefundedTransactions() async throws {
        let (appStore, client) = try Self.standInAndClient()
        appStore.setTransactionPageSize(1)
        let ids = (1...4).map { "200000000000050\($0)" }
        for id in ids {
            appStore.recordTransaction(try Self.signed(id), transactionId: TransactionID(id), originalTransactionId: TransactionID(id), customer: "alice")
        }
        appStore.recordTransaction(try Self.signed("2000000000000600", refunded: true), transactionId: "2000000000000600",
                                   originalTransactionId: "2000000000000600", customer: "bob", refunded: true)
        var refunds: [String] = []
        for index in [3, 0] { // the fourth refunded before the first
            let jws = try Self.signed(ids[index], refunded: true)
            appStore.recordTransaction(jws, transactionId: TransactionID(ids[index]), originalTransactionId: TransactionID(ids[index]),
                                       customer: "alice", refunded: true)
            refunds.append(jws)
        }
        let pages = try await Self.allPages { await client.refundHistory(of: TransactionID(ids[1]), revision: $0) }
        #expect(pages == refunds.map { [$0] })
        let verified = try refunds.map { try #require(try verifier().verifyTransaction($0).value) }
        #expect(verified.map(\.transactionId.rawValue) == [ids[3], ids[0]] && verified.allSatisfy { $0.revocationDate != nil })
    }

    @Test func subscriptionStatusesAreGroupedWithTheirRawAndTypedStatus() async throws {
        let (appStore, client) = try Self.standInAndClient()
        appStore.recordTransaction("alice-jws", transactionId: "2000000000000700", originalTransactionId: "2000000000000700", customer: "alice")
        let records: [(group: String, original: TransactionID, status: Int, customer: String)] = [
            ("group.premium", "1000000000000001", 1, "alice"), ("group.extras", "1000000000000002", 4, "alice"),
            ("group.premium", "1000000000000003", 5, "alice"), ("group.premium", "1000000000000004", 2, "bob"),
            ("group.extras", "1000000000000005", 9, "alice"), ("group.premium", "1000000000000001", 3, "alice"), // replaces the first
        ]
        for record in records {
            appStore.recordSubscriptionStatus(groupIdentifier: record.group, originalTransactionId: record.original, status: record.status,
                                              signedTransaction: "transaction-\(record.original)", signedRenewalInfo: "renewal-\(record.original)",
                                              customer: record.customer)
        }
        let entries = try await client.subscriptionStatuses(of: "2000000000000700").get()
        func entry(_ group: String, _ original: TransactionID, _ status: Int) -> SubscriptionStatusEntry {
            SubscriptionStatusEntry(subscriptionGroupIdentifier: group, originalTransactionId: original, rawStatus: status,
                                    signedTransactionInfo: "transaction-\(original)", signedRenewalInfo: "renewal-\(original)")
        }
        #expect(entries == [entry("group.premium", "1000000000000001", 3), entry("group.premium", "1000000000000003", 5),
                            entry("group.extras", "1000000000000002", 4), entry("group.extras", "1000000000000005", 9)])
        #expect(entries.map(\.status) == [.billingRetry, .revoked, .gracePeriod, nil], "a status Apple may add keeps its number, with no case")
        let byOriginal = try await client.subscriptionStatuses(of: "1000000000000002").get()
        #expect(byOriginal == entries, "an original transaction id of the customer names them too")
        #expect(Self.failure(await client.subscriptionStatuses(of: "1000000000000999")) == .refused(status: 404, detail: "Transaction id not found. (errorCode 4040010)"))
    }

    /// A 429's wait holds every call of the client, whichever endpoint (Get Transaction Info after any other): none is
    /// made before the time, each told what is left of the wait; once it passed, the API is asked again.
    @Test func aRateLimitIsUnavailableWithTheWaitAskedFor() async throws {
        let key = try PrivateKey.generateP256()
        let appStore = try AppStoreServerAPIClientTests.standIn(publicKey: try key.publicKey())
        // The client's clock, moved past the wait at the end.
        let ahead = Mutex<TimeInterval>(0)
        let client = AppStoreServerAPIClient(configuration: .init(baseURL: appStore.baseURL, keyId: "KEY123", issuerId: "issuer-uuid",
                                                                  bundleId: BundleID(bundleId), privateKey: key),
                                             now: { Date().addingTimeInterval(ahead.withLock { $0 }) })
        appStore.recordTransaction("jws", transactionId: "2000000000000800", originalTransactionId: "2000000000000800", customer: "alice")
        appStore.fail(.init(status: 429, times: 1, retryAfterSeconds: 30))
        // Each call timed from the first: the wait is what is left of Apple's 30 s when the answer is read, however slow
        // the machine.
        let first = ContinuousClock.now
        func timed(_ call: () async -> AppStoreServerAPIClient.Failure?) async -> (AppStoreServerAPIClient.Failure?, Duration) {
            let failure = await call()
            return (failure, ContinuousClock.now - first)
        }
        let failures = [await timed { Self.failure(await client.transactionInfo("2000000000000800")) },
                        await timed { Self.failure(await client.transactionHistory(of: "2000000000000800")) },
                        await timed { Self.failure(await client.refundHistory(of: "2000000000000800")) },
                        await timed { Self.failure(await client.subscriptionStatuses(of: "2000000000000800")) }]
        for (index, (failure, took)) in failures.enumerated() {
            guard case .unavailable(let why, let wait?)? = failure else { Issue.record("expected unavailable with a wait: \(String(describing: failure))"); continue }
            #expect(index == 0 ? why == "App Store Server API answered HTTP 429" : why.hasPrefix("App Store Server API asked to wait"), "\(why)")
            #expect(wait <= .seconds(30) && wait >= .seconds(29) - took, "the wait Retry-After asked for: \(wait), the call took \(took)")
        }
        #expect(appStore.requests.count == 1, "no call while the wait runs, whichever endpoint")
        ahead.withLock { $0 = 31 }
        #expect(try await client.transactionHistory(of: "2000000000000800").get().signedTransactions == ["jws"], "answered again once the limit passed")
    }

    /// A stand-in signed by another key refuses the client's token (401): the operator must fix the key, so unavailable.
    @Test func aTokenOfAnotherKeyIsRefusedAndThatIsUnavailable() async throws {
        let (appStore, client) = try Self.standInAndClient(standInKey: try PrivateKey.generateP256())
        appStore.recordTransaction("jws", transactionId: "2000000000000900", originalTransactionId: "2000000000000900", customer: "alice")
        let unauthenticated = Failure.unavailable("App Store Server API answered HTTP 401")
        #expect(Self.failure(await client.transactionInfo("2000000000000900")) == unauthenticated)
        #expect(Self.failure(await client.transactionHistory(of: "2000000000000900")) == unauthenticated)
        #expect(Self.failure(await client.refundHistory(of: "2000000000000900")) == unauthenticated)
        #expect(Self.failure(await client.subscriptionStatuses(of: "2000000000000900")) == unauthenticated)
        #expect(appStore.requests.isEmpty, "no request was served")
    }

    /// An answer that is not the documented shape is not taken for an empty history: unavailable, saying what was wrong.
    @Test func aBodyNotOfTheDocumentedShapeIsUnavailable() async throws {
        let bodies: [String: String] = [
            "/inApps/v1/transactions/1": #"{"transactionInfo":"jws"}"#,
            "/inApps/v2/history/1": #"{"signedTransactions":["a","b"],"hasMore":true}"#,
            "/inApps/v2/history/2": #"{"signedTransactions":["a",7],"hasMore":false,"revision":"r"}"#,
            "/inApps/v2/refund/lookup/1": #"{"signedTransactions":[],"revision":"r"}"#,
            "/inApps/v1/subscriptions/1": #"{"data":[{"subscriptionGroupIdentifier":"g","lastTransactions":[{"originalTransactionId":"1","status":1}]}]}"#,
            "/inApps/v1/subscriptions/2": "not json",
        ]
        let server = try HTTPServer(configuration: .init(), synchronousHandler: { request in
            bodies[request.path].map { HTTPResponse(status: 200, contentType: "application/json", body: $0) } ?? HTTPResponse(status: 404)
        })
        let client = Self.client(URL(string: "http://127.0.0.1:\(server.port)")!, key: try PrivateKey.generateP256())
        #expect(Self.failure(await client.transactionInfo("1")) == .unavailable("App Store Server API: a transaction info that is not a TransactionInfoResponse"))
        #expect(Self.failure(await client.transactionHistory(of: "1"))
                == .unavailable("App Store Server API: a HistoryResponse page with more to read and no revision"))
        #expect(Self.failure(await client.transactionHistory(of: "2"))
                == .unavailable("App Store Server API: a HistoryResponse with a signed transaction that is not a JWS string"))
        #expect(Self.failure(await client.refundHistory(of: "1"))
                == .unavailable("App Store Server API: an answer that is not a RefundHistoryResponse (signedTransactions and hasMore)"))
        #expect(Self.failure(await client.subscriptionStatuses(of: "1"))
                == .unavailable("App Store Server API: a StatusResponse subscription that is not a lastTransactionsItem"))
        #expect(Self.failure(await client.subscriptionStatuses(of: "2"))
                == .unavailable("App Store Server API: subscription statuses that are not a StatusResponse (no data)"))
    }
}

import Crypto
import Foundation
import Ingest
import JSON
import PurchaseDomain
@testable import PurchaseStore
import RequestSigning
import Testing
import TestSupport

/// `iapctl user`: what a user owns, read back as apps would get it.
@Suite struct UserCommandTests {
    @Test func printsBalancesEntitlementsInForceAndPendingPurchases() async throws {
        let url = "sqlite:" + FileManager.default.temporaryDirectory.appendingPathComponent("user-\(UUID().uuidString).sqlite").path
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        let now = Date()
        let grants: [(id: TransactionID, product: ProductID, type: ProductType, item: GrantItem, finish: Bool)] = [
            ("u-1", "coins.100", .consumable, .currency("coins", 100), true),
            ("u-2", "coins.100", .consumable, .currency("coins", 100), false),
            ("u-3", "adfree", .nonConsumable, .entitlement("adfree"), true),
            ("u-4", "pass.monthly", .autoRenewable, .entitlement("pass", until: now.addingTimeInterval(-60)), true),
        ]
        for grant in grants {
            let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: grant.id), userId: "user-7", productId: grant.product,
                                        productType: grant.type, quantity: 1, purchaseTime: now)
            _ = try await store.recordVerified(record, at: now)
            _ = try await store.grant(record.key, items: [grant.item], at: now)
            if grant.finish { _ = try await store.finish(record.key, at: now) }
        }
        // The pass's subscription will not renew; another subscription's status nobody owns yet is no one's.
        _ = try await store.recordSubscriptionStatus(SubscriptionStatus(store: .appstore, originalTransactionId: "u-4", productId: "pass.monthly", willRenew: false,
                                                                        gracePeriodEndsAt: now.addingTimeInterval(86_400), asOf: now))
        _ = try await store.recordSubscriptionStatus(SubscriptionStatus(store: .appstore, originalTransactionId: "u-9", productId: "pass.monthly", asOf: now))
        let result = try await VerifyCommandTests.run(["user", "user-7", "--store", url], input: "")
        #expect(result.status == 0)
        let json = try #require(result.lines.last.flatMap { JSONValue.parse(Array($0.utf8)) }?.objectValue, "\(result.lines)")
        #expect(json["userId"]?.stringValue == "user-7")
        #expect(json["balances"]?.objectValue?["coins"]?.int64Value == 200)
        let entitlements = json["entitlements"]?.arrayValue ?? []
        #expect(entitlements.count == 1, "the expired pass is not in force: \(entitlements)")
        #expect(entitlements.first?.objectValue?["entitlement"]?.stringValue == "adfree")
        #expect(entitlements.first?.objectValue?["productId"]?.stringValue == "adfree")
        #expect(entitlements.first?.objectValue?["expiresAt"] == .null, "for good: null, not missing")
        #expect(json["pending"]?.arrayValue?.compactMap { $0.objectValue?["transactionId"]?.stringValue } == ["u-2"])
        let subscription = try #require(json["subscriptions"]?.arrayValue?.first?.objectValue, "\(json)")
        #expect(json["subscriptions"]?.arrayValue?.count == 1)
        #expect(subscription["originalTransactionId"]?.stringValue == "u-4" && subscription["willRenew"] == .bool(false))
        #expect(subscription["gracePeriodEndsAt"]?.stringValue.flatMap(RFC3339.parse) != nil, "times as RFC 3339")
        #expect(try await VerifyCommandTests.run(["user", "--store", url], input: "").status == 2, "a user id is required")

        try await readSideAnswersTheSameSignedAndRefusesTheRest(url: url, expected: result.lines.last ?? "")
    }

    /// `iap-ingest --store` answers `GET /v1/users/{userId}` with what `iapctl user` reads from the store, only to
    /// requests signed for that path within the clock tolerance. (No broker is needed to read.)
    func readSideAnswersTheSameSignedAndRefusesTheRest(url: String, expected: String) async throws {
        let secretFile = FileManager.default.temporaryDirectory.appendingPathComponent("read-secret-\(UUID().uuidString)")
        try Data("r3ad\n".utf8).write(to: secretFile)
        defer { try? FileManager.default.removeItem(at: secretFile) }
        let ingest = try ExecutableProcess("iap-ingest", ["--brokers", "127.0.0.1:1", "--http-port", "0", "--http-host", "127.0.0.1",
                                                          "--read-side", "--store", url, "--read-secret-file", secretFile.path])
        let base = "http://127.0.0.1:\(try await ingest.httpPort())"

        let asked = try await VerifyCommandTests.run(["user", "user-7", "--ingest", base, "--read-secret-file", secretFile.path], input: "")
        #expect(asked.status == 0)
        #expect(asked.lines.last == expected, "the app's answer is the operator's")

        let secret = Data("r3ad".utf8)
        let path = "/v1/users/user-7"
        let refused: [(String, [String: String])] = [
            ("unsigned", [:]),
            ("signed for another user", RequestSignature.headers(secret: secret, method: "GET", path: "/v1/users/user-8")),
            ("signed with another secret", RequestSignature.headers(secret: Data("other".utf8), method: "GET", path: path)),
            ("signed ten minutes ago", RequestSignature.headers(secret: secret, method: "GET", path: path, now: Date().addingTimeInterval(-600))),
            ("signed with a query it does not carry", RequestSignature.headers(secret: secret, method: "GET", path: path, query: "all=1")),
        ]
        for (why, headers) in refused {
            let answer = try await httpRequest(base + path, headers: headers)
            #expect(answer.status == 401, "\(why): \(answer.body)")
            #expect(answer.body.contains("badSignature"), "\(why)")
        }
        let signedPost = RequestSignature.headers(secret: secret, method: "POST", path: path)
        #expect(try await httpRequest(base + path, method: "POST", body: Data(), headers: signedPost).status == 405)
        let nested = "/v1/users/a/b"
        #expect(try await httpRequest(base + nested, headers: RequestSignature.headers(secret: secret, method: "GET", path: nested)).status == 400)
        let someoneElse = try await httpRequest(base + "/v1/users/user-8", headers: RequestSignature.headers(secret: secret, method: "GET", path: "/v1/users/user-8"))
        #expect(someoneElse.status == 200)
        #expect(someoneElse.body.contains(#""balances":{}"#), "a user with nothing owns nothing: \(someoneElse.body)")
        let control = "/v1/users/a%00b"
        #expect(try await httpRequest(base + control, headers: RequestSignature.headers(secret: secret, method: "GET", path: control)).status == 400,
                "control characters are no user id (and PostgreSQL would refuse them)")
        let metrics = try await httpRequest(base + "/metrics").body
        #expect(metrics.contains(#"iap_ingest_requests_total{route="users",status="401"} 5"#), "\(metrics)")
        #expect(try await ingest.terminate() == 0)


        // Without a secret it serves only on a private address; without --read-side not at all, whatever the store.
        let noSecret = ["IAP_INGEST_READ_SECRET": ""] // whatever the caller's environment holds
        let open = try ExecutableProcess("iap-ingest", ["--brokers", "127.0.0.1:1", "--http-port", "0", "--http-host", "0.0.0.0", "--read-side", "--store", url],
                                         environment: noSecret)
        try await waitUntil("iap-ingest refuses to start") { !open.process.isRunning }
        #expect(open.process.terminationStatus == 2)
        #expect(open.log.contains { $0.contains("--read-secret-file") }, "\(open.log)")
        let local = try ExecutableProcess("iap-ingest", ["--brokers", "127.0.0.1:1", "--http-port", "0", "--http-host", "127.0.0.1", "--read-side", "--store", url],
                                          environment: noSecret)
        #expect(try await httpRequest("http://127.0.0.1:\(try await local.httpPort())" + path).status == 200)
        #expect(try await local.terminate() == 0)
        let off = try ExecutableProcess("iap-ingest", ["--brokers", "127.0.0.1:1", "--http-port", "0", "--http-host", "0.0.0.0", "--store", url],
                                        environment: noSecret)
        #expect(try await httpRequest("http://127.0.0.1:\(try await off.httpPort())" + path).status == 404, "a shared IAP_STORE_URL alone serves nothing")
        #expect(try await off.terminate() == 0)
    }

    /// `iapctl user --history`: the same pages from the store and from the ingest's signed read side, each page's `next`
    /// the `before` of the one after.
    @Test func theHistoryIsReadAPageAtATimeFromTheStoreAndFromTheIngest() async throws {
        let directory = try TestDirectory("history")
        defer { directory.remove() }
        let url = "sqlite:" + directory.path("store.sqlite")
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        let t0 = Date(timeIntervalSince1970: 1_764_400_000)
        for index in 0..<3 {
            let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: TransactionID("hist-\(index)")), userId: "user-h",
                                        productId: "coins.100", productType: .consumable, quantity: 1, purchaseTime: t0.addingTimeInterval(Double(index) * 10))
            _ = try await store.recordVerified(record, at: record.purchaseTime.addingTimeInterval(1))
            _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: record.purchaseTime.addingTimeInterval(2))
        }
        let secret = try directory.file("read.secret", "r3ad\n")
        let ingest = try ExecutableProcess("iap-ingest", ["--brokers", "127.0.0.1:1", "--http-port", "0", "--http-host", "127.0.0.1",
                                                          "--read-side", "--store", url, "--read-secret-file", secret])
        let base = "http://127.0.0.1:\(try await ingest.httpPort())"
        func page(_ source: [String], before: String?) async throws -> (events: [String], next: String?) {
            let result = try await VerifyCommandTests.run(["user", "user-h", "--history", "--limit", "5"] + source + (before.map { ["--before", $0] } ?? []), input: "")
            #expect(result.status == 0, "\(result.lines)")
            let json = try #require(result.lines.last.flatMap { JSONValue.parse(Array($0.utf8)) }?.objectValue, "\(result.lines)")
            let events = (json["events"]?.arrayValue ?? []).compactMap(\.objectValue).map {
                "\($0["kind"]?.stringValue ?? "?") \($0["transactionId"]?.stringValue ?? "-")"
            }
            return (events, json["next"]?.stringValue)
        }
        for source in [["--store", url], ["--ingest", base, "--read-secret-file", secret]] {
            var all: [String] = []
            var before: String?
            repeat {
                let (events, next) = try await page(source, before: before)
                #expect(events.count == (next == nil ? 2 : 5), "\(source): \(events)")
                all += events
                before = next
            } while before != nil && all.count < 20
            #expect(all == (0..<3).reversed().flatMap { ["itemGranted hist-\($0)", "granted hist-\($0)", "verified hist-\($0)", "purchased hist-\($0)"] },
                    "\(source): \(all)")
        }
        let path = "/v1/users/user-h/history"
        let key = Data("r3ad".utf8)
        #expect(try await httpRequest(base + path + "?limit=2", headers: RequestSignature.headers(secret: key, method: "GET", path: path)).status == 401,
                "the query is signed too")
        for (query, error) in [("limit=0", "invalidLimit"), ("before=nonsense", "invalidCursor"), ("all=1", "unknownParameter")] {
            let answer = try await httpRequest(base + path + "?" + query, headers: RequestSignature.headers(secret: key, method: "GET", path: path, query: query))
            #expect(answer.status == 400 && answer.body.contains(error), "\(query): \(answer.body)")
        }
        #expect(try await ingest.terminate() == 0)
    }

    /// `iapctl user erase`: the user is gone from every read (the store's and the ingest's: 404), nothing in the store names
    /// them, and the books still balance under a pseudonym; a user with messages parked is not erased yet.
    @Test func anErasedUserIsGoneFromEveryReadWhileTheBooksStillBalance() async throws {
        let directory = try TestDirectory("erase")
        defer { directory.remove() }
        let url = "sqlite:" + directory.path("store.sqlite")
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        let now = Date()
        for (id, user) in [("e-1", "user-e"), ("e-2", "user-e"), ("k-1", "user-kept")] {
            let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: TransactionID(id)), userId: UserID(user), productId: "coins.100",
                                        productType: .consumable, quantity: 1, purchaseTime: now, appAccountToken: "5e0c2a31-7d4f-4b8e-9a61-0000000000ee")
            _ = try await store.recordVerified(record, at: now)
            _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: now)
        }
        _ = try await store.adjust(Adjustment(id: "comp-e", userId: "user-e", requestedBy: "support", reason: "outage", items: [.currency("coins", -50)]),
                                   takeWhatIsLeft: false, at: now)
        _ = try await store.recordConsent(userId: "user-e", consumptionData: true, decidedAt: now, now: now)
        _ = try await store.registerAccountToken("5e0c2a31-7d4f-4b8e-9a61-0000000000ee", for: "user-e", at: now)
        func count(_ sql: String) async throws -> Int64 {
            try await store.executor.run { connection in try connection.query(sql).first?[0].int64 ?? -1 }
        }
        let coinsBefore = try await count("SELECT sum(amount) FROM balances")
        let ledgerBefore = try await count("SELECT sum(amount) FROM ledger")
        let booksBefore = try await Self.books(url)
        #expect(booksBefore?["balanced"] == .bool(true) && booksBefore?["currencyTotals"] == .object(["coins": .integer(250)]), "\(String(describing: booksBefore))")

        // Parked messages hold the id until re-driven: not yet.
        _ = try await store.executor.run { connection in
            try connection.query("""
                INSERT INTO parked_messages (stage, origin_topic, origin_partition, origin_offset, message_key, recheck, token, reason, parked_at)
                VALUES ('granter', 't', 0, 1, 'user-e', 0, 'x', 'r', 0)
                """)
        }
        let parked = try await VerifyCommandTests.run(["user", "erase", "user-e", "--store", url], input: "")
        #expect(parked.status == 1 && parked.lines.last?.contains("messagesParked") == true, "\(parked.lines)")
        _ = try await store.executor.run { connection in try connection.query("DELETE FROM parked_messages") }

        let erased = try await VerifyCommandTests.run(["user", "erase", "user-e", "--store", url], input: "")
        #expect(erased.status == 0, "\(erased.lines)")
        let report = try #require(erased.lines.last.flatMap { JSONValue.parse(Array($0.utf8)) }?.objectValue)
        #expect(report["purchases"] == .integer(2) && report["ledgerEntries"] == .integer(3))
        let pseudonym = try #require(report["pseudonym"]?.stringValue)
        #expect(try await VerifyCommandTests.run(["user", "erase", "user-e", "--store", url], input: "").lines.last?.contains("erasedBefore") == true)

        // Nothing names the user; the books balance as before, the pseudonym's as the user's did.
        for table in ["purchases", "ledger", "balances", "entitlements", "adjustments", "rejections", "consents", "account_tokens"] {
            #expect(try await count("SELECT count(*) FROM \(table) WHERE user_id = 'user-e'") == 0, "\(table)")
        }
        #expect(try await count("SELECT count(*) FROM purchases WHERE app_account_token IS NOT NULL") == 1, "only the kept user's purchase keeps its token")
        #expect(try await count("SELECT sum(amount) FROM balances") == coinsBefore)
        #expect(try await count("SELECT sum(amount) FROM ledger") == ledgerBefore)
        #expect(try await store.balances(of: UserID(pseudonym)) == ["coins": 150])
        #expect(try await store.balances(of: "user-kept") == ["coins": 100])
        #expect(try await Self.books(url) == booksBefore, "iapctl books: balanced as before")

        for arguments in [["user", "user-e", "--store", url], ["user", "user-e", "--store", url, "--history"]] {
            let read = try await VerifyCommandTests.run(arguments, input: "")
            #expect(read.status == 1 && read.lines.last?.contains("userErased") == true, "\(arguments): \(read.lines)")
        }
        let ingest = try ExecutableProcess("iap-ingest", ["--brokers", "127.0.0.1:1", "--http-port", "0", "--http-host", "127.0.0.1", "--read-side", "--store", url],
                                           environment: ["IAP_INGEST_READ_SECRET": ""])
        let base = "http://127.0.0.1:\(try await ingest.httpPort())"
        for path in ["/v1/users/user-e", "/v1/users/user-e/history"] {
            let answer = try await httpRequest(base + path)
            #expect(answer.status == 404 && answer.body.contains("userErased"), "\(path): \(answer.body)")
        }
        #expect(try await httpRequest(base + "/v1/users/user-kept").status == 200)

        // The id used again (a new account): it starts afresh, and is read again.
        let again = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: "e-3"), userId: "user-e", productId: "coins.100",
                                   productType: .consumable, quantity: 1, purchaseTime: now)
        _ = try await store.recordVerified(again, at: now)
        _ = try await store.grant(again.key, items: [.currency("coins", 100)], at: now)
        let afresh = try await httpRequest(base + "/v1/users/user-e")
        #expect(afresh.status == 200 && afresh.body.contains(#""coins":100"#), "\(afresh.body)")
        #expect(try await ingest.terminate() == 0)
    }

    /// `iapctl books`: its JSON report when it exits 0 (balanced); nil, recorded, when it does not.
    static func books(_ url: String) async throws -> [String: JSONValue]? {
        let result = try await VerifyCommandTests.run(["books", "--store", url], input: "")
        #expect(result.status == 0, "iapctl books: \(result.lines)")
        return result.lines.last.flatMap { JSONValue.parse(Array($0.utf8)) }?.objectValue
    }

    /// `iapctl books` finds what a change by hand broke: a balance that is not its entries' sum, an entry without its purchase
    /// or adjustment, a purchase finished without its grant. Each is counted, with examples, and the exit status is 1.
    @Test func theBooksCheckFindsWhatAChangeByHandBroke() async throws {
        let directory = try TestDirectory("books")
        defer { directory.remove() }
        let url = "sqlite:" + directory.path("store.sqlite")
        let store = try SQLPurchaseStore(url: url)
        try await store.migrate()
        let now = Date()
        for id in ["b-1", "b-2"] {
            let record = PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: TransactionID(id)), userId: "user-b", productId: "coins.100",
                                        productType: .consumable, quantity: 1, purchaseTime: now)
            _ = try await store.recordVerified(record, at: now)
            _ = try await store.grant(record.key, items: [.currency("coins", 100)], at: now)
        }
        _ = try await store.adjust(Adjustment(id: "gift-b", userId: "user-b", requestedBy: "support", reason: "outage", items: [.currency("coins", 25)]),
                                   takeWhatIsLeft: false, at: now)
        let balanced = try await Self.books(url)
        #expect(balanced?["balanced"] == .bool(true) && balanced?["purchases"] == .object(["granted": .integer(2)]), "\(String(describing: balanced))")
        _ = try await store.executor.run { connection in
            try connection.query("UPDATE balances SET amount = amount + 1 WHERE user_id = 'user-b'")
            try connection.query("DELETE FROM purchases WHERE transaction_id = 'b-2'")
            try connection.query("DELETE FROM adjustments WHERE adjustment_id = 'gift-b'")
            try connection.query("UPDATE purchases SET finished_at = granted_at - 1, state = 'finished' WHERE transaction_id = 'b-1'")
        }
        let broken = try await VerifyCommandTests.run(["books", "--store", url], input: "")
        #expect(broken.status == 1)
        let report = try #require(broken.lines.last.flatMap { JSONValue.parse(Array($0.utf8)) }?.objectValue, "\(broken.lines)")
        #expect(report["balanced"] == .bool(false))
        #expect(report["balanceMismatches"]?.objectValue?["examples"] == .array([.string("user-b coins: balance 226, ledger 225")]))
        #expect(report["grantsWithoutPurchase"]?.objectValue?["count"] == .integer(1))
        #expect(report["adjustmentEntriesWithoutAdjustment"]?.objectValue?["examples"] == .array([.string("gift-b")]))
        #expect(report["finishedWithoutGrant"]?.objectValue?["count"] == .integer(1))
    }

    @Test func privateAddressesAreLoopbackRFC1918LinkLocalAndUniqueLocal() {
        for host in ["127.0.0.1", "localhost", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.0.1", "::1", "fd00::1", "fe80::1"] {
            #expect(PrivateAddress.contains(host), "\(host)")
        }
        for host in ["0.0.0.0", "::", "8.8.8.8", "172.32.0.1", "192.169.0.1", "2001:db8::1", "example.com"] {
            #expect(!PrivateAddress.contains(host), "\(host)")
        }
        for host in ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"] { #expect(PrivateAddress.isLoopback(host), "\(host)") }
        for host in ["10.1.2.3", "192.168.1.1", "fd00::1", "0.0.0.0", "::", "128.0.0.1", "localhost.example.com"] {
            #expect(!PrivateAddress.isLoopback(host), "\(host)")
        }
    }
}

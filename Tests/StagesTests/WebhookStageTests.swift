import Foundation
import HTTPClient
import HTTPServer
import InMemoryPurchaseStore
import Kafka
import PurchaseDomain
import PurchaseEvents
import RequestSigning
import StageTestSupport
@testable import Stages
import Synchronization
import Testing
import WorkerRuntime

/// One endpoint of `iap-webhooks` against a receiver in the test process: what it sends, how it is signed, which events it
/// leaves out, and how each answer is taken.
@Suite struct WebhookStageTests {
    static let secret = Data("receiver-secret".utf8)

    /// A receiver answering `status` (with `headers`), keeping every request.
    final class Receiver: Sendable {
        final class State: Sendable {
            let requests = Mutex<[HTTPRequest]>([])
            /// Every request, those answered 503 too.
            let attempts = Mutex<[HTTPRequest]>([])
            /// A request whose body contains this is answered 503 (a user whose events fail), and not kept in `requests`.
            let failing = Mutex<String?>(nil)
            let answer: Mutex<HTTPResponse>
            init(_ answer: HTTPResponse) { self.answer = Mutex(answer) }
        }

        let state: State
        let server: HTTPServer

        init(status: Int = 204, headers: [String: String] = [:]) throws {
            let state = State(HTTPResponse(status: status, headers: headers))
            self.state = state
            server = try HTTPServer(synchronousHandler: { request in
                state.attempts.withLock { $0.append(request) }
                if let failing = state.failing.withLock({ $0 }), String(decoding: request.body, as: UTF8.self).contains(failing) {
                    return HTTPResponse(status: 503)
                }
                state.requests.withLock { $0.append(request) }
                return state.answer.withLock { $0 }
            })
        }

        var received: [HTTPRequest] { state.requests.withLock { $0 } }
        func answer(_ response: HTTPResponse) { state.answer.withLock { $0 = response } }
        deinit { server.shutdown() }
    }

    /// What the stage reported of each event, in order.
    final class Outcomes: Sendable {
        private let list = Mutex<[WebhookOutcome]>([])
        func append(_ outcome: WebhookOutcome) { list.withLock { $0.append(outcome) } }
        var all: [WebhookOutcome] { list.withLock { $0 } }
    }

    static func stage(port: UInt16, path: String = "/iap/events?tenant=a%20b", events: [EventType] = WebhooksFile.defaultEvents,
                      scope: WebhookStage.AppScope? = nil, observed: Outcomes? = nil) -> WebhookStage {
        WebhookStage(context: StageContext(codec: StageFixtures.codec, logger: Logger(stage: "webhook-test", minimum: .error)),
                     endpoint: .init(name: "backend", url: URL(string: "http://127.0.0.1:\(port)\(path)")!, secret: secret, events: events),
                     client: WebhookStage.client(timeoutSeconds: 5, connections: 16, proxy: .none), scope: scope, observe: { _, outcome in observed?.append(outcome) })
    }

    static func granted(_ transaction: String, user: String = "user-1", alreadyGranted: Bool = false, extendedUntil: Date? = nil) -> ItemGranted {
        ItemGranted(store: .appstore, transactionId: TransactionID(transaction), userId: UserID(user), productId: ProductID("coins.100"), productType: "consumable",
                    quantity: 1, items: [GrantedItem(kind: .currency, code: "coins", amount: 100, balance: 250)], alreadyGranted: alreadyGranted,
                    grantedAt: Date(timeIntervalSince1970: 1_800_000_000), extendedUntil: extendedUntil)
    }

    /// Binary mode: the event's JSON as the body, its attributes as `ce-*` headers; the signature covers the path and query as sent.
    @Test func anEventIsPostedAsASignedCloudEvent() async throws {
        let receiver = try Receiver()
        let observed = Outcomes()
        let message = try StageFixtures.message(Self.granted("1001"))
        let result = try await Self.stage(port: receiver.server.port, observed: observed).handle(message)
        guard case .publish(let outputs) = result else { Issue.record("delivered, not \(result)"); return }
        #expect(outputs.isEmpty)
        let request = try #require(receiver.received.first)
        #expect(receiver.received.count == 1)
        #expect(request.method == "POST" && request.path == "/iap/events" && request.query == "tenant=a%20b")
        #expect(request.body == message.value)
        #expect(request.header("content-type") == "application/json")
        #expect(request.header("ce-specversion") == "1.0")
        #expect(request.header("ce-type") == "iap.item.granted.v1")
        #expect(request.header("ce-id") == "granted:appstore:1001")
        #expect(request.header("ce-source") == "/test")
        #expect(request.header("ce-time") == message.header("ce_time"))
        #expect(request.header("ce-dataschema") == message.header("ce_dataschema"))
        #expect(Self.refusal(RequestSignature.verify(request, secret: Self.secret)) == nil)
        #expect(Self.refusal(RequestSignature.verify(request, secret: Data("another".utf8))) == .mismatch)
        var tampered = request
        tampered.body = Data(String(decoding: request.body, as: UTF8.self).replacingOccurrences(of: "250", with: "9250").utf8)
        #expect(Self.refusal(RequestSignature.verify(tampered, secret: Self.secret)) == .mismatch, "the body is signed")
        #expect(observed.all == [.delivered])
    }

    static func refusal(_ verdict: Result<Void, RequestSignature.Refusal>) -> RequestSignature.Refusal? {
        if case .failure(let refusal) = verdict { refusal } else { nil }
    }

    /// A repeat is sent like the first, with the same `ce-id`: it may be the only grant event of its purchase (the granter
    /// stopped between its commit and its publish), and receivers act once per `ce-id`.
    @Test func repeatsAreSentWithTheFirstsId() async throws {
        let receiver = try Receiver(status: 200)
        let observed = Outcomes()
        let stage = Self.stage(port: receiver.server.port, observed: observed)
        for grant in [Self.granted("1001"), Self.granted("1001", alreadyGranted: true)] {
            guard case .publish = try await stage.handle(try StageFixtures.message(grant)) else { Issue.record("delivered"); continue }
        }
        #expect(receiver.received.map { $0.header("ce-id") ?? "" } == ["granted:appstore:1001", "granted:appstore:1001"])
        #expect(observed.all == [.delivered, .delivered])
    }

    /// An endpoint of one app of several gets that app's events alone: a grant by the app it names (none: the primary one),
    /// a refund by its purchase's app in the store; a refund of a purchase the store does not know goes to no such endpoint.
    @Test func anEndpointOfSomeAppsGetsTheirEventsAlone() async throws {
        let receiver = try Receiver()
        let store = InMemoryPurchaseStore()
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        for (id, app) in [("p-1", AppID("puzzle")), ("c-1", AppID("coins-game"))] {
            _ = try await store.recordVerified(PurchaseRecord(key: PurchaseKey(store: .appstore, transactionId: TransactionID(id)), userId: "user-1", productId: "coins.100",
                                                              productType: .consumable, quantity: 1, purchaseTime: now, app: app), at: now)
        }
        let stage = Self.stage(port: receiver.server.port, scope: .init(apps: ["puzzle"], primary: "coins-game", purchases: store,
                                                                        currencies: ["hints"], entitlements: ["puzzle-pack"]))
        var puzzleGrant = Self.granted("p-1")
        puzzleGrant.app = "puzzle"
        func refund(_ id: String) -> RefundDue {
            RefundDue(store: .appstore, transactionId: TransactionID(id), userId: "user-1", productId: "coins.100", state: "granted", purchaseDate: now,
                      deadline: now.addingTimeInterval(86_400), flaggedAt: now.addingTimeInterval(86_400))
        }
        for message in [try StageFixtures.message(puzzleGrant), try StageFixtures.message(Self.granted("c-1")), try StageFixtures.message(refund("p-1")),
                        try StageFixtures.message(refund("c-1")), try StageFixtures.message(refund("unknown-1"))] {
            guard case .publish = try await stage.handle(message) else { Issue.record("handled, not dead-lettered"); continue }
        }
        #expect(receiver.received.map { $0.header("ce-type") ?? "" } == ["iap.item.granted.v1", "iap.refund.due.v1"])
        #expect(receiver.received.allSatisfy { String(decoding: $0.body, as: UTF8.self).contains(#""transactionId":"p-1""#) })

        // Adjustments: by their items, the currencies and entitlements the endpoint's apps give.
        func adjusted(_ id: String, _ items: [GrantItem]) -> UserAdjusted {
            UserAdjusted(UserAdjustment(adjustmentId: AdjustmentID(id), userId: "user-1", requestedBy: "support", reason: "outage", requestedAt: now),
                         outcome: .applied(items: items, balances: [:], shortfall: [:]), at: now)
        }
        for adjustment in [adjusted("a-coins", [.currency("coins", 50)]), adjusted("a-hints", [.currency("coins", 50), .currency("hints", 5)]),
                           adjusted("a-pack", [GrantItem(kind: .entitlement, code: "puzzle-pack", amount: 1)])] {
            _ = try await stage.handle(try StageFixtures.message(adjustment))
        }
        #expect(receiver.received.compactMap { $0.header("ce-id") }.filter { $0.hasPrefix("adjusted:") } == ["adjusted:a-hints", "adjusted:a-pack"])
    }

    /// A batch: each user's events in order, one at a time, different users' at once. The answer ends at the first failure;
    /// what was delivered after it is answered from memory when the runner hands it again, not sent twice; the failing
    /// user's later event is not sent at all.
    @Test func aBatchSendsEachUsersEventsInOrderAndNothingTwice() async throws {
        let receiver = try Receiver()
        receiver.state.failing.withLock { $0 = #""userId":"user-2""# }
        let stage = Self.stage(port: receiver.server.port)
        let plan = [("1", "user-1"), ("2", "user-2"), ("3", "user-1"), ("4", "user-3"), ("5", "user-2"), ("6", "user-1")]
        let messages = try plan.enumerated().map { offset, grant in
            try StageFixtures.message(Self.granted(grant.0, user: grant.1), offset: Int64(offset))
        }
        let answers = await stage.handle(batch: messages)
        #expect(answers.count == 2, "user-1's first, then user-2's failure")
        if answers.count == 2, case .failure(let error) = answers[1] { #expect(error is TransientError) } else { Issue.record("\(answers)") }
        func sent() -> [String] { receiver.received.map { $0.header("ce-id") ?? "" } }
        #expect(Set(sent()) == ["granted:appstore:1", "granted:appstore:3", "granted:appstore:4", "granted:appstore:6"])
        #expect(receiver.state.attempts.withLock { $0 }.filter { String(decoding: $0.body, as: UTF8.self).contains(#""userId":"user-2""#) }.count == 1,
                "user-2's second event is not tried after its first failed")
        #expect(sent().filter { ["granted:appstore:1", "granted:appstore:3", "granted:appstore:6"].contains($0) }
                == ["granted:appstore:1", "granted:appstore:3", "granted:appstore:6"], "user-1's in order")

        // The runner retries user-2's event, then hands the rest again.
        receiver.state.failing.withLock { $0 = nil }
        guard case .publish = try await stage.handle(messages[1]) else { Issue.record("delivered"); return }
        let rest = await stage.handle(batch: Array(messages[2...]))
        #expect(rest.count == 4 && rest.allSatisfy { if case .success(.publish) = $0 { true } else { false } })
        #expect(sent().sorted() == (1...6).map { "granted:appstore:\($0)" }, "each once")
        #expect(sent().filter { ["granted:appstore:2", "granted:appstore:5"].contains($0) } == ["granted:appstore:2", "granted:appstore:5"])
    }

    /// What a batch delivered beyond its answer is kept until taken, the oldest forgotten first beyond the limit.
    @Test func answersKeptAheadAreTakenOnceAndTheOldestForgottenFirst() throws {
        let kept = AnsweredAhead()
        let messages = try (0...Int64(AnsweredAhead.limit)).map { try StageFixtures.message(Self.granted("\($0)"), offset: $0) }
        for message in messages { kept.keep(.publish([]), for: message) }
        #expect(kept.take(messages[0]) == nil, "the oldest, forgotten")
        #expect(kept.take(messages[1]) != nil)
        #expect(kept.take(messages[1]) == nil, "taken once")
        #expect(kept.take(messages[AnsweredAhead.limit]) != nil)
    }

    /// An endpoint's requests on their way are at most its connections: the next waits for a permit (and is signed then),
    /// the longest waiting first.
    @Test func requestsBeyondTheConnectionsWaitTheirTurnInOrder() async throws {
        let permits = SendPermits(1)
        await permits.acquire()
        final class Order: Sendable {
            let names = Mutex<[String]>([])
            func append(_ name: String) { names.withLock { $0.append(name) } }
            var all: [String] { names.withLock { $0 } }
        }
        let order = Order()
        let second = Task {
            await permits.acquire()
            order.append("second")
            permits.release()
        }
        while permits.waiting < 1 { await Task.yield() }
        let third = Task {
            await permits.acquire()
            order.append("third")
            permits.release()
        }
        while permits.waiting < 2 { await Task.yield() }
        #expect(order.all.isEmpty, "both wait while the permit is held")
        permits.release()
        await second.value
        await third.value
        #expect(order.all == ["second", "third"])
        #expect(permits.waiting == 0)
    }

    /// What is not a valid event is dead-lettered and never signed and sent on.
    @Test func anInvalidEventIsDeadLetteredUnsent() async throws {
        let receiver = try Receiver()
        var message = try StageFixtures.message(Self.granted("1001"))
        message = KafkaMessage(topic: message.topic, partition: 0, offset: 0, key: message.key, value: Data(#"{"userId":"user-1"}"#.utf8), headers: message.headers)
        let result = try await Self.stage(port: receiver.server.port).handle(message)
        guard case .deadLetter(let reason, _) = result else { Issue.record("dead-lettered, not \(result)"); return }
        #expect(reason == "schemaViolation")
        #expect(receiver.received.isEmpty)
    }

    /// 5xx and 429 are retried (the receiver's `Retry-After` kept), so are 401/404 (fixed on the receiver's side); 422 is
    /// the event refused: a dead letter with the receiver's answer.
    @Test func eachAnswerIsTakenAsItSays() async throws {
        let receiver = try Receiver(status: 503, headers: ["Retry-After": "7"])
        let stage = Self.stage(port: receiver.server.port)
        let message = try StageFixtures.message(Self.granted("1001"))
        let unavailable = await #expect(throws: TransientError.self) { try await stage.handle(message) }
        #expect(unavailable?.retryAfter == .seconds(7))
        for status in [429, 401, 404, 500, 301] {
            receiver.answer(HTTPResponse(status: status))
            let error = await #expect(throws: TransientError.self) { try await stage.handle(message) }
            #expect(error?.description.contains("\(status)") == true)
        }
        for status in [400, 413, 415, 422] {
            receiver.answer(HTTPResponse(status: status, contentType: "text/plain", body: "unknown product coins.100"))
            let refused = try await stage.handle(message)
            guard case .deadLetter(let reason, let detail) = refused else { Issue.record("\(status): dead-lettered, not \(refused)"); continue }
            #expect(reason == "webhookRefused")
            #expect(detail.contains("\(status)") && detail.contains("unknown product coins.100") && detail.contains("backend"))
        }
        receiver.answer(HTTPResponse(status: 202, contentType: "application/json", body: #"{"ok":true}"#))
        let accepted = try await stage.handle(message)
        guard case .publish = accepted else { Issue.record("202 delivers, not \(accepted)"); return }
        // A long answer is cut, not a failure: the receiver took the event.
        receiver.answer(HTTPResponse(status: 200, headers: ["Content-Type": "text/plain"], body: Data(repeating: 0x61, count: 2 << 20)))
        let long = try await stage.handle(message)
        guard case .publish = long else { Issue.record("a 200 with 2 MiB delivers, not \(long)"); return }
        receiver.answer(HTTPResponse(status: 422, headers: ["Content-Type": "text/plain"], body: Data(repeating: 0x62, count: 2 << 20)))
        guard case .deadLetter(_, let cut) = try await stage.handle(message) else { Issue.record("a 422 with 2 MiB refuses"); return }
        #expect(cut.contains(String(repeating: "b", count: 300)) && cut.count < 1_000)
    }

    /// No receiver listening: transient, retried.
    @Test func anEndpointThatIsDownIsRetried() async throws {
        let stage = Self.stage(port: 1) // nothing listens on tcpmux's port
        let message = try StageFixtures.message(Self.granted("1001"))
        let error = await #expect(throws: TransientError.self) { try await stage.handle(message) }
        #expect(error.map(stage.isTransient) == true)
    }

    /// Only the endpoint's chosen events are consumed; each endpoint has a stage (and group) of its own.
    @Test func theStageTakesTheChosenTopicsUnderTheEndpointsName() {
        let stage = Self.stage(port: 1, events: [.refundDue, .userAdjusted])
        #expect(stage.name == "webhook-backend")
        #expect(stage.topics == ["iap.refund.due", "iap.user.adjusted"])
    }

    /// CloudEvents' HTTP binding: an attribute value with bytes a header cannot carry as they are is percent-encoded, so
    /// no CR or LF reaches the request's head; only known attributes are sent, each once, and the content type is JSON's.
    @Test func attributeValuesCannotBreakTheRequestHead() async throws {
        let receiver = try Receiver()
        let produced = try StageFixtures.message(Self.granted("1001"))
        let headers = produced.headers.map {
            switch $0.key {
            case "ce_source": KafkaHeader(key: "ce_source", string: "/a b\r\nX-Evil: 1%\"")
            case "content-type": KafkaHeader(key: "content-type", string: "text/plain\r\nX-Evil: 2")
            default: $0
            }
        } + [KafkaHeader(key: "ce_x\r\nX-Evil", string: "1"), KafkaHeader(key: "ce_id", string: "second-id")]
        let message = KafkaMessage(topic: produced.topic, partition: 0, offset: 0, key: produced.key, value: produced.value, headers: headers)
        _ = try await Self.stage(port: receiver.server.port).handle(message)
        let request = try #require(receiver.received.first)
        #expect(request.header("ce-source") == "/a%20b%0D%0AX-Evil:%201%25%22")
        #expect(request.header("x-evil") == nil)
        #expect(request.header("content-type") == "application/json", "the body is JSON whatever the message's header says")
        #expect(request.header("ce-id") == "granted:appstore:1001", "the first of an attribute's headers, as the codec reads it")
        #expect(!request.headers.keys.contains { $0.hasPrefix("ce-x") })
    }
}

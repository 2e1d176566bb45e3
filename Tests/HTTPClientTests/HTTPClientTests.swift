import Dispatch
import Foundation
import HTTPClient
import HTTPServer
import Synchronization
import Testing
import TestSupport

/// The store APIs' client against a real HTTP/1.1 server in the test process.
@Suite struct HTTPClientTests {
    /// What the server saw of each request.
    final class Seen: Sendable {
        let requests = Mutex<[HTTPRequest]>([])
    }

    /// `Retry-After` as the server sent it: seconds; a number far beyond what libcurl keeps (≥ 8.12 caps it at six hours),
    /// such as the App Store's UNIX time in milliseconds, whole; a date, in seconds from now; none, nil.
    @Test func retryAfterIsReadAsItWasSent() async throws {
        let server = try HTTPServer { request in
            var headers: [String: String] = [:]
            switch request.path {
            case "/seconds": headers["Retry-After"] = "120"
            case "/milliseconds": headers["Retry-After"] = "1796537118000"
            case "/date": headers["Retry-After"] = Self.httpDate(Date().addingTimeInterval(3600))
            default: break
            }
            return HTTPResponse(status: 429, headers: headers)
        }
        defer { server.shutdown() }
        let client = HTTPClient(timeout: .seconds(10))
        func wait(_ path: String) async throws -> Duration? {
            try await client.send(.init(method: "GET", url: "http://127.0.0.1:\(server.port)\(path)")).get().retryAfter
        }
        #expect(try await wait("/seconds") == .seconds(120))
        #expect(try await wait("/milliseconds") == .seconds(1_796_537_118_000))
        let date = try #require(try await wait("/date"))
        #expect(date > .seconds(3500) && date <= .seconds(3600), "\(date)")
        #expect(try await wait("/none") == nil)
    }

    /// An IMF-fixdate (RFC 9110), as `Retry-After` carries a date.
    static func httpDate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }

    @Test func requestsArriveAsSentAndAnswersComeBackWhole() async throws {
        let seen = Seen()
        let server = try HTTPServer { request in
            seen.requests.withLock { $0.append(request) }
            return HTTPResponse(status: request.method == "PUT" ? 202 : 404, headers: ["Content-Type": "application/json"],
                                body: Data(#"{"errorCode":4040010,"path":"\#(request.path)"}"#.utf8))
        }
        let client = HTTPClient(timeout: .seconds(5))
        let base = "http://127.0.0.1:\(server.port)"
        let put = try await client.send(.init(method: "PUT", url: base + "/inApps/v2/transactions/consumption/42",
                                              headers: [("Authorization", "Bearer abc"), ("Content-Type", "application/json")],
                                              body: Array(#"{"customerConsented":true}"#.utf8))).get()
        #expect(put.status == 202)
        #expect(String(decoding: put.body, as: UTF8.self) == #"{"errorCode":4040010,"path":"/inApps/v2/transactions/consumption/42"}"#)
        let post = try await client.send(.init(method: "POST", url: base + "/inApps/v1/transactions/42/finish")).get()
        #expect(post.status == 404)
        let get = try await client.send(.init(method: "GET", url: base + "/a/b?c=d")).get()
        #expect(get.status == 404)
        let requests = seen.requests.withLock { $0 }
        #expect(requests.map(\.method) == ["PUT", "POST", "GET"])
        #expect(requests.map(\.path) == ["/inApps/v2/transactions/consumption/42", "/inApps/v1/transactions/42/finish", "/a/b"])
        #expect(requests[0].header("Authorization") == "Bearer abc")
        #expect(requests[0].header("Expect") == nil)
        #expect(String(decoding: requests[0].body, as: UTF8.self) == #"{"customerConsented":true}"#)
        #expect(requests[1].body.isEmpty && requests[1].header("Content-Length") == "0", "a POST without a body says so")
        #expect(requests[1].header("Content-Type") == nil, "and names no type")
        #expect(requests[0].header("Content-Type") == "application/json")
        #expect(requests[2].query == "c=d")
    }

    @Test func oneConnectionServesRequestAfterRequest() async throws {
        // Kept alive longer than the test may stall between two requests when the machine is busy (the server closes a
        // connection idle for its keep-alive timeout, and the client then connects anew).
        let server = try HTTPServer(configuration: .init(readTimeout: .seconds(600), keepAliveTimeout: .seconds(600))) { _ in HTTPResponse(status: 200) }
        let client = HTTPClient(timeout: .seconds(5), maxConnections: 4)
        for _ in 0..<20 {
            #expect(try await client.send(.init(method: "POST", url: "http://127.0.0.1:\(server.port)/finish")).get().status == 200)
        }
        #expect(server.acceptedConnections == 1)
    }

    /// The client's thread waits up to a minute while no request runs: a request sent then must wake it, not wait.
    @Test func aRequestAfterAnIdleSpellIsSentAtOnce() async throws {
        // When each request reaches the server, taken on the connection's own thread: the answer's way back to this task
        // goes through the task pool, which the suite's other tests keep busy for seconds at a time, and is not what is
        // tested here.
        let arrived = Mutex<ContinuousClock.Instant?>(nil)
        let server = try HTTPServer(synchronousHandler: { _ in
            arrived.withLock { $0 = .now }
            return HTTPResponse(status: 200)
        })
        let client = HTTPClient(timeout: .seconds(5))
        let url = "http://127.0.0.1:\(server.port)/"
        #expect(try await client.send(.init(method: "GET", url: url)).get().status == 200)
        for _ in 0..<3 {
            // The idle spell itself (the thread gone to sleep in its wait, which nothing outside it shows), not a wait for
            // a condition: without it the next request finds the thread still awake from the last answer.
            try await Task.sleep(for: .milliseconds(200))
            let started = ContinuousClock.now
            #expect(try await client.send(.init(method: "GET", url: url)).get().status == 200)
            let reached = try #require(arrived.withLock { $0 })
            // Far under the idle wait (60 s) on the slowest machine; a lost wakeup takes the whole wait.
            #expect(reached - started < .seconds(20), "reached the server after \(reached - started)")
        }
    }

    /// Ten requests at once through four connections: never more than four at the server, all answered.
    @Test func requestsBeyondTheConnectionsWaitTheirTurn() async throws {
        let inFlight = Atomic<Int>(0)
        let most = Atomic<Int>(0)
        let release = DispatchSemaphore(value: 0)
        let server = try HTTPServer(configuration: .init(maxConnections: 64), synchronousHandler: { _ in
            let now = inFlight.add(1, ordering: .relaxed).newValue
            most.max(now, ordering: .relaxed)
            release.wait()
            inFlight.subtract(1, ordering: .relaxed)
            return HTTPResponse(status: 200)
        })
        let client = HTTPClient(timeout: .seconds(30), maxConnections: 4)
        async let answers = withTaskGroup(of: Int.self) { group in
            for _ in 0..<10 { group.addTask { (try? await client.send(.init(method: "GET", url: "http://127.0.0.1:\(server.port)/")).get().status) ?? 0 } }
            return await group.reduce(into: []) { $0.append($1) }
        }
        try await waitUntil("four requests are at the server") { inFlight.load(ordering: .relaxed) == 4 }
        for _ in 0..<10 { release.signal() }
        #expect(await answers == Array(repeating: 200, count: 10))
        #expect(most.load(ordering: .relaxed) == 4)
        #expect(server.acceptedConnections == 4)
    }

    /// A batch through four connections: each answer in its request's place, a failed one among them too.
    @Test func aBatchIsAnsweredInItsOrder() async throws {
        let server = try HTTPServer { request in HTTPResponse(status: 200, body: Data(request.path.utf8)) }
        let client = HTTPClient(timeout: .seconds(5), maxConnections: 4)
        var requests = (0..<10).map { HTTPClient.Request(method: "POST", url: "http://127.0.0.1:\(server.port)/\($0)") }
        requests[3] = .init(method: "GET", url: "http://127.0.0.1:1/refused")
        let answers = await client.send(all: requests)
        #expect(answers.count == 10)
        for (index, answer) in answers.enumerated() where index != 3 {
            #expect((try? answer.get()).map { String(decoding: $0.body, as: UTF8.self) } == "/\(index)")
        }
        guard case .failure = answers[3] else { Issue.record("a refused connection answered: \(answers[3])"); return }
        #expect(await client.send(all: []).isEmpty)
        #expect(server.acceptedConnections <= 4)
    }

    @Test func noAnswerInTimeIsAFailure() async throws {
        let release = DispatchSemaphore(value: 0)
        let server = try HTTPServer(synchronousHandler: { _ in
            release.wait()
            return HTTPResponse(status: 200)
        })
        defer { release.signal() }
        let client = HTTPClient(timeout: .milliseconds(200))
        guard case .failure(let failure) = await client.send(.init(method: "POST", url: "http://127.0.0.1:\(server.port)/finish")) else {
            Issue.record("answered without an answer")
            return
        }
        #expect(failure.description.localizedCaseInsensitiveContains("timeout") || failure.description.localizedCaseInsensitiveContains("timed out"),
                "\(failure)")
    }

    @Test func aRefusedConnectionAndAnOversizedAnswerAreFailures() async throws {
        let server = try HTTPServer { _ in HTTPResponse(status: 200, body: Data(count: 4096)) }
        let port = server.port
        let small = HTTPClient(timeout: .seconds(5), maxBodyBytes: 1024)
        guard case .failure(let tooLarge) = await small.send(.init(method: "GET", url: "http://127.0.0.1:\(port)/")) else {
            Issue.record("an answer over the limit was taken")
            return
        }
        #expect(tooLarge.description.contains("larger than 1024 bytes"))
        #expect(try await HTTPClient(timeout: .seconds(5)).send(.init(method: "GET", url: "http://127.0.0.1:\(port)/")).get().body.count == 4096)
        // Truncating: the status and the body's start, not a failure.
        let cut = try await HTTPClient(timeout: .seconds(5), maxBodyBytes: 1024, truncatingBody: true).send(.init(method: "GET", url: "http://127.0.0.1:\(port)/")).get()
        #expect(cut.status == 200 && cut.body.count == 1024)
        server.shutdown()
        guard case .failure = await HTTPClient(timeout: .seconds(5)).send(.init(method: "GET", url: "http://127.0.0.1:\(port)/")) else {
            Issue.record("answered by a server that stopped")
            return
        }
        guard case .failure = await small.send(.init(method: "GET", url: "file:///etc/passwd")) else {
            Issue.record("fetched a file: URL")
            return
        }
    }
}

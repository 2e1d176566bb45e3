import Foundation
import Synchronization

/// A small HTTP/1.1 client for the store APIs, over libcurl (TLS verified against the system's CAs): up to
/// `maxConnections` requests at once, all run by one thread of the client's over connections kept alive from one
/// request to the next. Nothing is cached, no cookies, no redirects followed. Requests go through the proxy the client's
/// `Proxy` names (by default the one the environment names, as curl reads it).
///
/// Written for the finisher's Finish Transaction calls: URLSession on Linux is libcurl too, under layers of dispatch
/// queues, callbacks and header parsing that `perf` put at a fifth of the finisher's CPU. One thread for all requests
/// (a libcurl multi handle), not one per connection: the answers of a batch's calls wake it once, not once each.
public final class HTTPClient: Sendable {
    /// A request: `method` (`GET`, `POST`, `PUT`, …) on an absolute `http`/`https` URL.
    public struct Request: Sendable {
        public var method: String
        public var url: String
        public var headers: [(name: String, value: String)]
        public var body: [UInt8]?

        public init(method: String, url: String, headers: [(name: String, value: String)] = [], body: [UInt8]? = nil) {
            self.method = method
            self.url = url
            self.headers = headers
            self.body = body
        }
    }

    /// An answer, whatever its status.
    public struct Response: Sendable {
        public let status: Int
        public let body: [UInt8]
        /// How long the server asked us to wait before trying again (`Retry-After`, in seconds or as a date).
        public let retryAfter: Duration?
    }

    /// No answer: the connection failed, timed out, or the answer was too large or malformed. Its description never names
    /// the request's URL (a store API's path carries a purchase token): it is logged.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    struct Limits: Sendable {
        var timeoutMilliseconds: Int
        var maxBodyBytes: Int
        /// A longer answer keeps its first `maxBodyBytes` rather than failing.
        var truncatesBody = false
        var proxy: Proxy
    }

    private let shared: Shared

    /// Requests in flight at once, at most.
    public var maxConnections: Int { shared.maxConnections }

    /// What the client shares with its thread; the thread holds it, not the client, whose `deinit` stops the thread.
    private final class Shared: Sendable {
        let limits: Limits
        let maxConnections: Int
        let state = Mutex(State())
        /// Nil when libcurl could not make one: every request then fails with `multiFailure`.
        let multi: CurlMulti?
        let multiFailure: Failure?

        init(limits: Limits, maxConnections: Int) {
            self.limits = limits
            self.maxConnections = maxConnections
            switch Result(catching: { () throws(Failure) in try CurlMulti(maxConnections: maxConnections) }) {
            case .success(let multi): (self.multi, multiFailure) = (multi, nil)
            case .failure(let failure): (multi, multiFailure) = (nil, failure)
            }
        }
    }

    private struct State {
        /// Requests not yet handed to libcurl, oldest first: at most what batches ask at once, taken from the front.
        var queue: [Pending] = []
        var threadStarted = false
        var stopped = false
    }

    /// A request waiting for libcurl, and where its answer goes: a continuation of its own (`send(_:)`) or its place in
    /// a batch (`send(all:)`).
    private struct Pending {
        let request: Request
        let reply: @Sendable (Result<Response, Failure>) -> Void
    }

    /// The answers of a batch, resumed once when the last arrives.
    private final class Batch: Sendable {
        let answers: Mutex<(results: [Result<Response, Failure>?], missing: Int)>
        let continuation: CheckedContinuation<[Result<Response, Failure>], Never>

        init(count: Int, continuation: CheckedContinuation<[Result<Response, Failure>], Never>) {
            answers = Mutex((Array(repeating: nil, count: count), count))
            self.continuation = continuation
        }

        func answer(_ index: Int, _ result: Result<Response, Failure>) {
            let complete = answers.withLock { answers -> [Result<Response, Failure>]? in
                answers.results[index] = result
                answers.missing -= 1
                return answers.missing == 0 ? answers.results.map { $0 ?? .failure(Failure("no answer")) } : nil
            }
            if let complete { continuation.resume(returning: complete) }
        }
    }

    /// - Parameter timeout: for the whole of each request, connecting included.
    /// - Parameter maxConnections: requests in flight at once (and connections); the rest wait their turn.
    /// - Parameter maxBodyBytes: a longer answer is a failure, or with `truncatingBody` keeps only that much (for callers
    ///   that act on the status and read no more than the start of the body, such as webhooks out).
    /// - Parameter proxy: what the requests go through; by default the proxy the process's environment names.
    public init(timeout: Duration, maxConnections: Int = 16, maxBodyBytes: Int = 1 << 20, truncatingBody: Bool = false, proxy: Proxy = .environment()) {
        let milliseconds = timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000
        shared = Shared(limits: Limits(timeoutMilliseconds: Int(max(1, milliseconds)), maxBodyBytes: maxBodyBytes, truncatesBody: truncatingBody,
                                       proxy: proxy),
                        maxConnections: max(1, maxConnections))
    }

    deinit {
        shared.state.withLock { $0.stopped = true }
        shared.multi?.wakeup()
    }

    /// Sends `request` and returns the answer, or why there is none.
    public func send(_ request: Request) async -> Result<Response, Failure> {
        guard let multi = shared.multi else { return .failure(shared.multiFailure ?? Failure("libcurl could not make a multi handle")) }
        return await withCheckedContinuation { continuation in
            enqueue([Pending(request: request, reply: { continuation.resume(returning: $0) })], multi)
        }
    }

    /// Sends `requests`, at most `maxConnections` at once with those of other callers, and returns their answers in their
    /// order once all are in: one wakeup of the caller for the batch, not one task and one wakeup per request.
    public func send(all requests: [Request]) async -> [Result<Response, Failure>] {
        guard !requests.isEmpty else { return [] }
        guard let multi = shared.multi else {
            return Array(repeating: .failure(shared.multiFailure ?? Failure("libcurl could not make a multi handle")), count: requests.count)
        }
        return await withCheckedContinuation { continuation in
            let batch = Batch(count: requests.count, continuation: continuation)
            enqueue(requests.enumerated().map { index, request in Pending(request: request, reply: { batch.answer(index, $0) }) }, multi)
        }
    }

    private func enqueue(_ pending: [Pending], _ multi: CurlMulti) {
        let startThread = shared.state.withLock { state -> Bool in
            state.queue += pending
            defer { state.threadStarted = true }
            return !state.threadStarted
        }
        if startThread { Self.startThread(shared, multi) } else { multi.wakeup() }
    }

    /// The client's thread: hands queued requests to libcurl while fewer than `maxConnections` run, moves them on, and
    /// answers each as it ends; until the client is gone and nothing is left to answer.
    private static func startThread(_ shared: Shared, _ multi: CurlMulti) {
        let thread = Thread {
            var idle: [CurlEasy] = []
            var running: [UnsafeMutableRawPointer: (easy: CurlEasy, reply: @Sendable (Result<Response, Failure>) -> Void)] = [:]
            while true {
                let (taken, stopped) = shared.state.withLock { state in
                    let taken = Array(state.queue.prefix(shared.maxConnections - running.count))
                    state.queue.removeFirst(taken.count)
                    return (taken, state.stopped)
                }
                if stopped && taken.isEmpty && running.isEmpty { return }
                for pending in taken {
                    let easy: CurlEasy
                    if let reused = idle.popLast() {
                        easy = reused
                    } else {
                        switch Result(catching: { () throws(Failure) in try CurlEasy() }) {
                        case .success(let made): easy = made
                        case .failure(let failure):
                            pending.reply(.failure(failure))
                            continue
                        }
                    }
                    if let failure = easy.prepare(pending.request, limits: shared.limits) ?? multi.add(easy) {
                        idle.append(easy)
                        pending.reply(.failure(failure))
                        continue
                    }
                    running[easy.handle] = (easy, pending.reply)
                }
                multi.perform()
                while let (handle, result) = multi.nextDone() {
                    guard let transfer = running.removeValue(forKey: handle) else { continue }
                    let answer = transfer.easy.answer(result, limits: shared.limits)
                    idle.append(transfer.easy)
                    transfer.reply(answer)
                }
                // Requests queued and room for them: taken at once. Else woken by a transfer's socket, one of libcurl's
                // timeouts, or a request queued (`wakeup`).
                if running.count < shared.maxConnections && shared.state.withLock({ !$0.queue.isEmpty }) { continue }
                // A poll that failed returned at once: not again at once, or the thread would spin.
                if !multi.poll(milliseconds: running.isEmpty ? 60_000 : 1000) { Thread.sleep(forTimeInterval: 0.01) }
            }
        }
        thread.name = "http-client"
        thread.start()
    }
}

import Dispatch
import Foundation
import Synchronization

/// A small HTTP/1.1 client for the store APIs, over libcurl (TLS verified against the system's CAs): up to
/// `maxConnections` requests at once, each on a thread of its own with a connection kept alive from one request to
/// the next. Nothing is cached, no cookies, no redirects followed.
///
/// Written for the finisher's Finish Transaction calls: URLSession on Linux is libcurl too, under layers of dispatch
/// queues, callbacks and header parsing that `perf` put at a fifth of the finisher's CPU.
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

    /// No answer: the connection failed, timed out, or the answer was too large or malformed.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    struct Limits: Sendable {
        var timeoutMilliseconds: Int
        var maxBodyBytes: Int
    }

    private let maxConnections: Int
    private let shared: Shared

    /// What the client shares with its threads; they hold it, not the client, whose `deinit` stops them.
    private final class Shared: Sendable {
        let limits: Limits
        let state = Mutex(State())
        /// One signal per request queued (and per thread to stop): a thread waits on it for work.
        let work = DispatchSemaphore(value: 0)

        init(limits: Limits) { self.limits = limits }
    }

    private struct State {
        var queue: [Pending] = []
        var head = 0
        var threads = 0
        var idle = 0
        var stopped = false
    }

    private struct Pending {
        let request: Request
        let continuation: CheckedContinuation<Result<Response, Failure>, Never>
    }

    /// - Parameter timeout: for the whole of each request, connecting included.
    /// - Parameter maxConnections: requests in flight at once (and threads); the rest wait their turn.
    /// - Parameter maxBodyBytes: a longer answer is a failure.
    public init(timeout: Duration, maxConnections: Int = 16, maxBodyBytes: Int = 1 << 20) {
        let milliseconds = timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000
        shared = Shared(limits: Limits(timeoutMilliseconds: Int(max(1, milliseconds)), maxBodyBytes: maxBodyBytes))
        self.maxConnections = max(1, maxConnections)
    }

    deinit {
        let threads = shared.state.withLock { state in
            state.stopped = true
            return state.threads
        }
        for _ in 0..<threads { shared.work.signal() }
    }

    /// Sends `request` and returns the answer, or why there is none.
    public func send(_ request: Request) async -> Result<Response, Failure> {
        await withCheckedContinuation { continuation in
            let startThread = shared.state.withLock { state -> Bool in
                state.queue.append(Pending(request: request, continuation: continuation))
                // A thread more while every thread is busy and there may be more.
                guard state.idle < state.queue.count - state.head, state.threads < maxConnections else { return false }
                state.threads += 1
                return true
            }
            if startThread { Self.startThread(shared) }
            shared.work.signal()
        }
    }

    /// A thread that sends queued requests, one at a time, over its own connection, until the client stops it.
    private static func startThread(_ shared: Shared) {
        let thread = Thread {
            let easy = Result { () throws(Failure) in try CurlEasy() }
            shared.state.withLock { $0.idle += 1 }
            while true {
                shared.work.wait()
                let next = shared.state.withLock { state -> Pending? in
                    guard state.head < state.queue.count else { return nil }
                    state.idle -= 1
                    let pending = state.queue[state.head]
                    state.head += 1
                    if state.head == state.queue.count {
                        state.queue.removeAll(keepingCapacity: true)
                        state.head = 0
                    }
                    return pending
                }
                guard let next else {
                    if shared.state.withLock({ $0.stopped }) { return }
                    continue
                }
                let answer = switch easy {
                case .success(let easy): easy.perform(next.request, limits: shared.limits)
                case .failure(let failure): Result<Response, Failure>.failure(failure)
                }
                // Idle again before the caller hears back: its next request finds this thread (and its connection).
                shared.state.withLock { $0.idle += 1 }
                next.continuation.resume(returning: answer)
            }
        }
        thread.name = "http-client"
        thread.start()
    }
}

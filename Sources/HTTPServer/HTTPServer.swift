import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A small HTTP/1.1 server over POSIX sockets, for health and metrics endpoints, webhooks, and the
/// stand-in store APIs of tests. A connection is kept alive for up to `maxRequestsPerConnection` requests (HTTP/1.1
/// clients reuse it rather than connect per request), and closed once idle for `keepAliveTimeout` or once the server
/// shuts down.
///
/// Bounded against malformed requests, slow clients and floods: headers and bodies have size limits, the whole
/// request (headers and body) must arrive within `requestTimeout` however slowly it trickles, at most
/// `maxConnections` connections are served at once and at most `maxConnectionsPerAddress` from one client address
/// (more are answered 503 and closed, or, with `evictsWaitingConnections`, take the slot of the one that has waited
/// longest for its request head). Memory is bounded with them: the bodies held at once stay within `bodyBudgetBytes` (a
/// body waits briefly for room, else 503 with `Retry-After`), a body over its route's `bodyLimit` is refused on its
/// `Content-Length` before it is read, and besides its body a connection holds a 4 KiB read buffer and its head (at most
/// `maxHeaderBytes`). The grammar is strict: every line of the head ends in CRLF, header names are tokens, a header
/// appears once, an HTTP/1.1 request names its `Host`, `Content-Length` is digits, and `Transfer-Encoding` is refused —
/// so no proxy in front can read a different request boundary than this server, and no chunked body is ever held.
public final class HTTPServer: Sendable {
    public typealias Handler = @Sendable (HTTPRequest) async -> HTTPResponse
    /// A handler that answers without suspending; it runs on the connection's thread.
    public typealias SynchronousHandler = @Sendable (HTTPRequest) -> HTTPResponse

    private enum Responder: Sendable {
        case async(Handler)
        case sync(SynchronousHandler)
    }

    public struct Configuration: Sendable {
        public var host: String
        /// 0 picks a free port; read it back from `port`.
        public var port: UInt16
        /// The longest request head (request line, headers and the blank line); a longer one is answered 431.
        public var maxHeaderBytes: Int
        public var maxBodyBytes: Int
        /// The longest wait for one read.
        public var readTimeout: Duration
        /// The longest time to receive a whole request, headers and body.
        public var requestTimeout: Duration
        public var maxConnections: Int
        public var maxConnectionsPerAddress: Int
        /// Requests served on one connection before it is closed (1: `Connection: close` after each).
        public var maxRequestsPerConnection: Int
        /// How long a kept-alive connection may wait for its next request before it is closed.
        public var keepAliveTimeout: Duration
        /// When every slot is taken (or the new connection's address is at its cap), the connection that has waited
        /// longest for its request head — idle, trickling its head, or kept alive between requests — gives its slot
        /// to the new one instead of the new one being answered 503. For a port that must answer probes however many
        /// slow clients connect: a probe sends its whole head at once, so it is never the one waiting longest, and a
        /// head that had already arrived is answered even so. Connections reading a body or being answered keep theirs.
        public var evictsWaitingConnections: Bool
        /// The most bytes of request bodies held in memory at once, over all connections: a body's `Content-Length` is
        /// reserved before it is read and given back once its answer was sent or its connection ended. A body that finds
        /// no room waits up to `bodyBudgetPatience` for some, then is answered 503 with `Retry-After` (its bytes read
        /// and dropped, not held). Requests without a body never wait for it. Nil: no total, each body within its limit.
        public var bodyBudgetBytes: Int?
        /// How long a body waits for room in `bodyBudgetBytes` before it is answered 503.
        public var bodyBudgetPatience: Duration
        /// Routes that take less than `maxBodyBytes`, by method and path: a request whose `Content-Length` is over its
        /// route's limit is answered 413 before any byte of its body is read. Nil, or nil for a route: `maxBodyBytes`.
        public var bodyLimit: (@Sendable (_ method: String, _ path: String) -> BodyLimit?)?
        /// Told of each answer the server gives itself, before any handler: 400, 408, 413, 431, and 503 when connections
        /// or the body budget are spent; with the request's path once its head was read (413, a body's 503), else nil.
        /// For the caller's request metrics, which its handler alone cannot count.
        public var onRefusal: (@Sendable (_ status: Int, _ path: String?) -> Void)?

        public init(host: String = "127.0.0.1", port: UInt16 = 0, maxHeaderBytes: Int = 16 * 1024, maxBodyBytes: Int = 1024 * 1024,
                    readTimeout: Duration = .seconds(10), requestTimeout: Duration = .seconds(15), maxConnections: Int = 256,
                    maxConnectionsPerAddress: Int? = nil, maxRequestsPerConnection: Int = 1_000, keepAliveTimeout: Duration = .seconds(5),
                    evictsWaitingConnections: Bool = false, bodyBudgetBytes: Int? = nil, bodyBudgetPatience: Duration = .seconds(1),
                    bodyLimit: (@Sendable (_ method: String, _ path: String) -> BodyLimit?)? = nil) {
            self.bodyBudgetBytes = bodyBudgetBytes
            self.bodyBudgetPatience = bodyBudgetPatience
            self.bodyLimit = bodyLimit
            self.maxRequestsPerConnection = max(1, maxRequestsPerConnection)
            self.evictsWaitingConnections = evictsWaitingConnections
            self.keepAliveTimeout = keepAliveTimeout
            self.host = host
            self.port = port
            self.maxHeaderBytes = maxHeaderBytes
            self.maxBodyBytes = maxBodyBytes
            self.readTimeout = readTimeout
            self.requestTimeout = requestTimeout
            self.maxConnections = maxConnections
            self.maxConnectionsPerAddress = maxConnectionsPerAddress ?? maxConnections
        }
    }

    public let configuration: Configuration
    /// The port the server listens on.
    public let port: UInt16
    private let listener: Int32
    private let responder: Responder
    let state = Mutex(ConnectionState())
    /// The bytes of bodies held at once (`bodyBudgetBytes`); nil without a budget.
    let bodyBudget: BodyBudget?
    /// Signalled as each evicted connection ends, for the accept loop waiting to admit one.
    let evictedEnded = DispatchSemaphore(value: 0)

    /// Binds and starts accepting on a thread of its own; `handler` runs as a task per request.
    public convenience init(configuration: Configuration = Configuration(), handler: @escaping Handler) throws {
        try self.init(configuration: configuration, responder: .async(handler))
    }

    /// Binds and starts accepting; `handler` runs on the connection's (non-cooperative) thread.
    public convenience init(configuration: Configuration = Configuration(), synchronousHandler handler: @escaping SynchronousHandler) throws {
        try self.init(configuration: configuration, responder: .sync(handler))
    }

    private init(configuration: Configuration, responder: Responder) throws {
        self.configuration = configuration
        self.responder = responder
        bodyBudget = configuration.bodyBudgetBytes.map(BodyBudget.init(total:))
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw HTTPServerError("socket: \(String(cString: strerror(errno)))") }
        var reuse: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = configuration.port.bigEndian
        guard inet_pton(AF_INET, configuration.host, &address.sin_addr) == 1 else {
            close(listener)
            throw HTTPServerError("invalid IPv4 address '\(configuration.host)'")
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 512) == 0 else {
            let reason = String(cString: strerror(errno))
            close(listener)
            throw HTTPServerError("cannot listen on \(configuration.host):\(configuration.port): \(reason)")
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        self.listener = listener
        port = UInt16(bigEndian: actual.sin_port)
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "http-accept"
        thread.start()
    }

    deinit { shutdown() }

    /// Connections being served now.
    public var activeConnections: Int { state.withLock { $0.connections.count } }

    /// Connections served since the server started (to see clients keep theirs alive).
    public var acceptedConnections: Int { state.withLock { $0.accepted } }

    /// Bytes of request bodies held now within `bodyBudgetBytes` (0 without a budget).
    public var heldBodyBytes: Int { bodyBudget?.heldBytes ?? 0 }

    /// Stops accepting; connections in progress finish.
    public func shutdown() {
        let wasRunning = state.withLock { state -> Bool in
            defer { state.running = false }
            return state.running
        }
        if wasRunning {
            Glibc.shutdown(listener, Int32(SHUT_RDWR))
            close(listener)
        }
    }

    /// What the accept loop does after `accept` failed with `code`.
    enum AcceptFailure: Equatable { case retry, backOff, stop }

    /// Interrupted, or a connection gone before it was taken: at once again. The listener closed (shut down): stop. Anything
    /// else (out of descriptors or kernel memory, a network error Linux passes on): the listener is fine, so again after a
    /// moment; returning would leave the port dead for good while the process and its probes look healthy.
    static func afterAcceptFailure(_ code: Int32) -> AcceptFailure {
        switch code {
        case EINTR, ECONNABORTED: .retry
        case EBADF, EINVAL, ENOTSOCK: .stop
        default: .backOff
        }
    }

    private func acceptLoop() {
        while state.withLock({ $0.running }) {
            var peer = sockaddr_in()
            var peerLength = socklen_t(MemoryLayout<sockaddr_in>.size)
            let connection = withUnsafeMutablePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { accept(listener, $0, &peerLength) }
            }
            if connection < 0 {
                switch Self.afterAcceptFailure(errno) {
                case .retry: continue
                case .backOff: Thread.sleep(forTimeInterval: 0.05)
                case .stop: return
                }
                continue
            }
            var admission = admit(connection, from: peer.sin_addr.s_addr)
            // Evicted connections still ending: the new one waits for them (the next ones in the backlog), for a second at most.
            let patience = ContinuousClock.now + .seconds(1)
            while admission == .afterEvictedEnd && ContinuousClock.now < patience {
                _ = evictedEnded.wait(timeout: .now() + .milliseconds(10))
                admission = admit(connection, from: peer.sin_addr.s_addr)
            }
            guard admission == .admitted else {
                write(connection, HTTPResponse(status: 503, contentType: "text/plain", body: "busy\n").serialized())
                configuration.onRefusal?(503, nil)
                close(connection)
                continue
            }
            // Socket reads block, and an async handler's answer is awaited by blocking: each connection gets a
            // thread of its own (at most `maxConnections`, and those evicted until they end). Not a dispatch queue: on
            // Linux Swift's tasks run on the dispatch pool, so connections blocked there would starve the very handlers
            // they wait for.
            let thread = Thread { [self] in
                serve(connection)
                release(connection)
            }
            thread.stackSize = 512 * 1024
            thread.name = "http-connection"
            thread.start()
        }
    }

    private func serve(_ connection: Int32) {
        var timeout = timeval(tv_sec: Int(configuration.readTimeout.components.seconds), tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var pending: [UInt8] = [] // bytes read past the last request: the start of the next
        // What each read of a head fills (a body is read straight into its own buffer): one per connection, not per
        // request, and small, for `maxConnections` of them are held at once.
        var chunk = [UInt8](repeating: 0, count: Self.readBufferBytes)
        for served in 1...configuration.maxRequestsPerConnection {
            let response: HTTPResponse
            var keepAlive = false
            var failed = false
            if served > 1 { waitingForHead(connection) } // the first waits since it was admitted
            var reserved = 0 // the request's bytes within the body budget, given back once it is answered
            defer { bodyBudget?.release(reserved) }
            switch readRequest(connection, pending: &pending, chunk: &chunk, first: served == 1) {
            case .success(let (request, bodyBytes)):
                reserved = bodyBytes
                response = respond(to: request)
                // HTTP/1.1 keeps the connection unless either side says close; after an error the framing is not trusted.
                keepAlive = served < configuration.maxRequestsPerConnection && request.version == "HTTP/1.1" && response.status < 400
                    && !(request.headers["connection"] ?? "").lowercased().split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == "close" }
                    && state.withLock { $0.running } // Shutting down: each connection ends with the request in hand.
            case .failure(let error) where error.status == RequestError.idle.status:
                return // A kept-alive connection the client closed or left idle: nothing to answer.
            case .failure(let error):
                response = error.response
                failed = true
                configuration.onRefusal?(error.status, error.path)
            }
            // A response not sent whole leaves the client out of step with the connection: it ends there.
            let sent = write(connection, response.serialized(keepAlive: keepAlive))
            if sent && failed { drainBeforeClosing(connection, chunk: &chunk) }
            guard sent, keepAlive else { return }
        }
    }

    private func respond(to request: HTTPRequest) -> HTTPResponse {
        switch responder {
        case .sync(let handler):
            return handler(request)
        case .async(let handler):
            let result = ResponseBox()
            let done = DispatchSemaphore(value: 0)
            Task {
                result.set(await handler(request))
                done.signal()
            }
            done.wait()
            return result.value ?? HTTPResponse(status: 500)
        }
    }

    /// Whether all of `data` was sent.
    @discardableResult
    private func write(_ connection: Int32, _ data: Data) -> Bool {
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = send(connection, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if written < 0 && errno == EINTR { continue }
                if written <= 0 { return false }
                offset += written
            }
            return true
        }
    }
}

/// The async handler's response, handed back to the connection thread.
private final class ResponseBox: Sendable {
    private let storage = Mutex<HTTPResponse?>(nil)
    func set(_ response: HTTPResponse) { storage.withLock { $0 = response } }
    var value: HTTPResponse? { storage.withLock { $0 } }
}

public struct HTTPServerError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}

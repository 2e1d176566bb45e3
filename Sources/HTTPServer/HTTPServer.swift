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
/// (more are answered 503 and closed). The grammar is strict: header names are tokens, a header appears once,
/// `Content-Length` is digits, and `Transfer-Encoding` is refused — so no proxy in front can read a different
/// request boundary than this server.
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

        public init(host: String = "127.0.0.1", port: UInt16 = 0, maxHeaderBytes: Int = 16 * 1024, maxBodyBytes: Int = 1024 * 1024,
                    readTimeout: Duration = .seconds(10), requestTimeout: Duration = .seconds(15), maxConnections: Int = 256,
                    maxConnectionsPerAddress: Int? = nil, maxRequestsPerConnection: Int = 1_000, keepAliveTimeout: Duration = .seconds(5)) {
            self.maxRequestsPerConnection = max(1, maxRequestsPerConnection)
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
    private let state = Mutex(ConnectionState())

    struct ConnectionState {
        var running = true
        var connections = 0
        var accepted = 0
        var byAddress: [UInt32: Int] = [:]
    }

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
    public var activeConnections: Int { state.withLock { $0.connections } }

    /// Connections served since the server started (to see clients keep theirs alive).
    public var acceptedConnections: Int { state.withLock { $0.accepted } }

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
            let address = peer.sin_addr.s_addr
            let admitted = state.withLock { state -> Bool in
                guard state.connections < configuration.maxConnections,
                      state.byAddress[address, default: 0] < configuration.maxConnectionsPerAddress else { return false }
                state.connections += 1
                state.accepted += 1
                state.byAddress[address, default: 0] += 1
                return true
            }
            guard admitted else {
                write(connection, HTTPResponse(status: 503, contentType: "text/plain", body: "busy\n").serialized())
                close(connection)
                continue
            }
            // Socket reads block, and an async handler's answer is awaited by blocking: each connection gets a
            // thread of its own (at most `maxConnections`). Not a dispatch queue: on Linux Swift's tasks run on
            // the dispatch pool, so connections blocked there would starve the very handlers they wait for.
            let thread = Thread { [self] in
                serve(connection)
                state.withLock { state in
                    state.connections -= 1
                    state.byAddress[address, default: 1] -= 1
                    if state.byAddress[address] == 0 { state.byAddress[address] = nil }
                }
            }
            thread.stackSize = 512 * 1024
            thread.name = "http-connection"
            thread.start()
        }
    }

    private func serve(_ connection: Int32) {
        defer { close(connection) }
        var timeout = timeval(tv_sec: Int(configuration.readTimeout.components.seconds), tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var pending: [UInt8] = [] // bytes read past the last request: the start of the next
        var chunk = [UInt8](repeating: 0, count: 16 * 1024) // what each read fills: one per connection, not per request
        for served in 1...configuration.maxRequestsPerConnection {
            let response: HTTPResponse
            var keepAlive = false
            switch readRequest(connection, pending: &pending, chunk: &chunk, first: served == 1) {
            case .success(let request):
                response = respond(to: request)
                // HTTP/1.1 keeps the connection unless either side says close; after an error the framing is not trusted.
                keepAlive = served < configuration.maxRequestsPerConnection && request.version == "HTTP/1.1" && response.status < 400
                    && !(request.headers["connection"] ?? "").lowercased().split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == "close" }
                    && state.withLock { $0.running } // Shutting down: each connection ends with the request in hand.
            case .failure(let error) where error.status == RequestError.idle.status:
                return // A kept-alive connection the client closed or left idle: nothing to answer.
            case .failure(let error):
                response = HTTPResponse(status: error.status, contentType: "text/plain", body: error.message + "\n")
            }
            // A response not sent whole leaves the client out of step with the connection: it ends there.
            guard write(connection, response.serialized(keepAlive: keepAlive)), keepAlive else { return }
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

    private struct RequestError: Error {
        let status: Int
        let message: String
        /// No byte of a next request came on a kept-alive connection: closed without an answer.
        static let idle = RequestError(status: 0, message: "idle")
    }

    /// Reads up to `count` bytes into `chunk`, waiting at most the read timeout and never past `deadline`; ≤ 0 when
    /// the client closed, failed or ran out of time.
    private func read(_ connection: Int32, into chunk: inout [UInt8], count: Int, deadline: ContinuousClock.Instant) -> Int {
        while true {
            let remaining = min(configuration.readTimeout, deadline - ContinuousClock.now)
            guard remaining > .zero else { return 0 }
            let (seconds, attoseconds) = remaining.components
            var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int(max(1, attoseconds / 1_000_000_000_000)))
            setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let read = Glibc.read(connection, &chunk, count)
            // A signal (e.g. SIGCHLD of a child process) interrupts the wait, not the connection.
            if read < 0 && errno == EINTR { continue }
            return read
        }
    }

    /// Reads one request, all of it within `requestTimeout` (on a kept-alive connection, from its first byte: the wait
    /// for that is bounded by `readTimeout`). `pending` holds bytes already read, and is left with those read past the
    /// request; `chunk` is the connection's read buffer.
    private func readRequest(_ connection: Int32, pending: inout [UInt8], chunk: inout [UInt8], first: Bool) -> Result<HTTPRequest, RequestError> {
        var buffer = pending
        pending = []
        if !first && buffer.isEmpty {
            let count = read(connection, into: &chunk, count: chunk.count, deadline: ContinuousClock.now + configuration.keepAliveTimeout)
            if count <= 0 { return .failure(.idle) }
            buffer.append(contentsOf: chunk[0..<count])
        }
        let deadline = ContinuousClock.now + configuration.requestTimeout
        var headerEnd = 0
        var searchFrom = 0
        while true {
            if let end = Self.headEnd(buffer, from: searchFrom) {
                headerEnd = end
                break
            }
            if buffer.count > configuration.maxHeaderBytes { return .failure(RequestError(status: 431, message: "headers too large")) }
            let count = read(connection, into: &chunk, count: chunk.count, deadline: deadline)
            if count <= 0 { return .failure(RequestError(status: 408, message: "incomplete request")) }
            searchFrom = max(0, buffer.count - 3)
            buffer.append(contentsOf: chunk[0..<count])
        }
        guard Self.linesAreStrict(buffer[0..<headerEnd]) else {
            return .failure(RequestError(status: 400, message: "bare CR or LF, or a control character, in the request head"))
        }
        // On bytes: every line ends in CRLF (checked above), and a CR is never part of another character's UTF-8.
        var lines = Self.lines(buffer[0..<headerEnd])
        let requestLine = lines.removeFirst().split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
        guard requestLine.count == 3, Self.isToken(requestLine[0]), requestLine[1].first == UInt8(ascii: "/"),
              requestLine[1].allSatisfy({ $0 >= 0x21 && $0 <= 0x7E }), requestLine[2].elementsEqual("HTTP/1.1".utf8) || requestLine[2].elementsEqual("HTTP/1.0".utf8) else {
            return .failure(RequestError(status: 400, message: "malformed request line"))
        }
        var headers: [String: String] = [:]
        for line in lines {
            // name ":" OWS value OWS — the name a token (no spaces, no folding), each name once.
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), Self.isToken(line[..<colon]) else {
                return .failure(RequestError(status: 400, message: "malformed header"))
            }
            let name = String(decoding: line[..<colon].map { $0 | (($0 >= 0x41 && $0 <= 0x5A) ? 0x20 : 0) }, as: UTF8.self)
            var valueBytes = line[(colon + 1)...]
            while let first = valueBytes.first, first == 0x20 || first == 0x09 { valueBytes = valueBytes.dropFirst() }
            while let last = valueBytes.last, last == 0x20 || last == 0x09 { valueBytes = valueBytes.dropLast() }
            guard let value = String(validating: valueBytes, as: UTF8.self) else {
                return .failure(RequestError(status: 400, message: "headers are not UTF-8"))
            }
            if let earlier = headers[name] {
                // Framing and authentication headers must be unambiguous; list headers (a proxy chain's
                // X-Forwarded-For, Via) combine as RFC 9110 says.
                guard !Self.singleHeaders.contains(name), !name.hasPrefix("x-iap-") else {
                    return .failure(RequestError(status: 400, message: "header \(name) given twice"))
                }
                headers[name] = earlier + ", " + value
            } else {
                headers[name] = value
            }
        }
        if headers["transfer-encoding"] != nil {
            return .failure(RequestError(status: 400, message: "Transfer-Encoding is not supported; send Content-Length"))
        }
        let declared = headers["content-length"] ?? "0"
        guard let length = headerDecimal(declared).map(Int.init) else {
            return .failure(RequestError(status: 400, message: "invalid Content-Length"))
        }
        guard length <= configuration.maxBodyBytes else {
            return .failure(RequestError(status: 413, message: "body larger than \(configuration.maxBodyBytes) bytes"))
        }
        var body = Array(buffer[(headerEnd + 4)...])
        while body.count < length {
            let count = read(connection, into: &chunk, count: min(chunk.count, length - body.count), deadline: deadline)
            if count <= 0 { return .failure(RequestError(status: 408, message: "incomplete body")) }
            body.append(contentsOf: chunk[0..<count])
        }
        pending = Array(body.dropFirst(length))
        let target = requestLine[1]
        let query = target.firstIndex(of: UInt8(ascii: "?")).map { String(decoding: target[($0 + 1)...], as: UTF8.self) }
        let path = String(decoding: target.prefix { $0 != UInt8(ascii: "?") }, as: UTF8.self)
        return .success(HTTPRequest(method: String(decoding: requestLine[0], as: UTF8.self), path: path, query: query, headers: headers,
                                    body: Data(body.prefix(length)), version: String(decoding: requestLine[2], as: UTF8.self)))
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

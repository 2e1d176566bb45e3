import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Reading a request off a connection: its head within the limits and grammar, then its body.
extension HTTPServer {
    struct RequestError: Error {
        let status: Int
        let message: String
        /// The answer, when not the plain text of `status` and `message`.
        var answer: HTTPResponse?
        /// The request's path, when its head was read.
        var path: String?
        /// No byte of a next request came on a kept-alive connection: closed without an answer.
        static let idle = RequestError(status: 0, message: "idle")
        /// No room for the body within the body budget, in time.
        static let bodyBudgetSpent = RequestError(status: 503, message: "busy", answer: HTTPResponse(
            status: 503, headers: ["Content-Type": "text/plain", "Retry-After": "1"], body: Data("busy: too many request bodies at once; retry\n".utf8)))

        init(status: Int, message: String, answer: HTTPResponse? = nil) {
            self.status = status
            self.message = message
            self.answer = answer
        }

        var response: HTTPResponse { answer ?? HTTPResponse(status: status, contentType: "text/plain", body: message + "\n") }
    }

    /// Reads up to `count` bytes into `chunk`, waiting at most the read timeout and never past `deadline`; ≤ 0 when
    /// the client closed, failed or ran out of time.
    func read(_ connection: Int32, into chunk: inout [UInt8], count: Int, deadline: ContinuousClock.Instant) -> Int {
        chunk.withUnsafeMutableBytes { read(connection, into: $0.baseAddress!, count: min(count, $0.count), deadline: deadline) }
    }

    /// Reads up to `count` bytes to `destination`, as `read(_:into:count:deadline:)`.
    func read(_ connection: Int32, into destination: UnsafeMutableRawPointer, count: Int, deadline: ContinuousClock.Instant) -> Int {
        while true {
            let remaining = min(configuration.readTimeout, deadline - ContinuousClock.now)
            guard remaining > .zero else { return 0 }
            let (seconds, attoseconds) = remaining.components
            var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int(max(1, attoseconds / 1_000_000_000_000)))
            setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let read = Glibc.read(connection, destination, count)
            // A signal (e.g. SIGCHLD of a child process) interrupts the wait, not the connection.
            if read < 0 && errno == EINTR { continue }
            return read
        }
    }

    /// Reads one request, all of it within `requestTimeout` (on a kept-alive connection, from its first byte: the wait
    /// for that is bounded by `keepAliveTimeout`). `pending` holds bytes already read, and is left with those read past
    /// the request; `chunk` is the connection's read buffer. With the request, the bytes it holds within the body budget,
    /// to be released once it is answered.
    func readRequest(_ connection: Int32, pending: inout [UInt8], chunk: inout [UInt8], first: Bool)
        -> Result<(request: HTTPRequest, reserved: Int), RequestError> {
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
        var checked = 0 // the head's bytes found strict so far
        while true {
            let end = Self.headEnd(buffer, from: searchFrom)
            // Each line is checked as it arrives: a head with bare LFs is refused now, not once a CRLFCRLF it will never
            // send is given up on.
            guard let strict = Self.strictPrefix(buffer, from: checked, to: end.map { $0 + 4 } ?? buffer.count) else {
                return .failure(RequestError(status: 400, message: "bare CR or LF, or a control character, in the request head"))
            }
            checked = strict
            if let end {
                // The head is the request line, the headers and the blank line; `maxHeaderBytes` of it at most.
                guard end + 4 <= configuration.maxHeaderBytes else { return .failure(RequestError(status: 431, message: "headers too large")) }
                headerEnd = end
                break
            }
            if buffer.count >= configuration.maxHeaderBytes { return .failure(RequestError(status: 431, message: "headers too large")) }
            let count = read(connection, into: &chunk, count: chunk.count, deadline: deadline)
            if count <= 0 { return .failure(RequestError(status: 408, message: "incomplete request")) }
            searchFrom = max(0, buffer.count - 3)
            buffer.append(contentsOf: chunk[0..<count])
        }
        headReceived(connection)
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
        // RFC 9112 §3.2: an HTTP/1.1 request names its host (HTTP/1.0 may not), as a host and port.
        if let host = headers["host"] {
            guard Self.isHost(host.utf8) else { return .failure(RequestError(status: 400, message: "invalid Host")) }
        } else if requestLine[2].elementsEqual("HTTP/1.1".utf8) {
            return .failure(RequestError(status: 400, message: "an HTTP/1.1 request needs a Host header"))
        }
        if headers["transfer-encoding"] != nil {
            return .failure(RequestError(status: 400, message: "Transfer-Encoding is not supported; send Content-Length"))
        }
        let declared = headers["content-length"] ?? "0"
        guard let length = headerDecimal(declared).map(Int.init) else {
            return .failure(RequestError(status: 400, message: "invalid Content-Length"))
        }
        let method = String(decoding: requestLine[0], as: UTF8.self)
        let target = requestLine[1]
        let query = target.firstIndex(of: UInt8(ascii: "?")).map { String(decoding: target[($0 + 1)...], as: UTF8.self) }
        let path = String(decoding: target.prefix { $0 != UInt8(ascii: "?") }, as: UTF8.self)
        // Refused on its Content-Length, before a byte of the body is read or held; so is one the whole budget cannot hold.
        let route = configuration.bodyLimit?(method, path)
        let limit = min(configuration.maxBodyBytes, route?.bytes ?? configuration.maxBodyBytes, bodyBudget?.total ?? .max)
        guard length <= limit else {
            var error = RequestError(status: 413, message: "body larger than \(limit) bytes", answer: route?.refusal)
            error.path = path
            return .failure(error)
        }
        // Room for the whole body within the budget before any of it is read; given back by the caller once answered.
        var reserved = 0
        if length > 0, let bodyBudget {
            guard bodyBudget.reserve(length, patience: configuration.bodyBudgetPatience) else {
                var error = RequestError.bodyBudgetSpent
                error.path = path
                return .failure(error)
            }
            reserved = length
        }
        // The body is read straight into its own buffer, of its declared size: no copy of it is held meanwhile.
        let start = headerEnd + 4
        let arrived = min(length, buffer.count - start)
        var body = Data(count: length)
        body.replaceSubrange(0..<arrived, with: buffer[start..<(start + arrived)])
        var filled = arrived
        while filled < length {
            let count = body.withUnsafeMutableBytes { raw in
                read(connection, into: raw.baseAddress! + filled, count: length - filled, deadline: deadline)
            }
            if count <= 0 {
                bodyBudget?.release(reserved)
                return .failure(RequestError(status: 408, message: "incomplete body"))
            }
            filled += count
        }
        pending = Array(buffer[(start + arrived)...])
        return .success((HTTPRequest(method: method, path: path, query: query, headers: headers, body: body,
                                     version: String(decoding: requestLine[2], as: UTF8.self)), reserved))
    }

    /// After an error answer the client may still be sending (the rest of a head too large, a refused body): closing
    /// with its bytes unread makes the kernel reset the connection, which fails the client's sends (most clients then
    /// never read the answer) and can discard the answer itself. So the answer is followed by the end of the stream
    /// (FIN), and what the client still sends is read and dropped until it closes, for at most 2 s (a lingering close,
    /// bounded by time as web servers bound theirs); the connection may be evicted meanwhile.
    func drainBeforeClosing(_ connection: Int32, chunk: inout [UInt8]) {
        waitingForHead(connection)
        Glibc.shutdown(connection, Int32(SHUT_WR))
        let deadline = ContinuousClock.now + .seconds(2)
        while read(connection, into: &chunk, count: chunk.count, deadline: deadline) > 0 {}
    }
}

import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import HTTPServer
import Testing
import TestSupport

/// The HTTP server against clients that try to hold it or to make it read another request than a proxy would.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct HTTPServerHardeningTests {
    static func server(_ configuration: HTTPServer.Configuration = .init()) throws -> HTTPServer {
        try HTTPServer(configuration: configuration, synchronousHandler: { request in
            HTTPResponse(status: 200, contentType: "text/plain", body: "\(request.method) \(request.path) \(request.body.count)\n")
        })
    }

    /// Out of descriptors (EMFILE, ENFILE) or kernel memory, or after a network error Linux passes on, the accept loop
    /// waits a moment and accepts again: returning left the port dead for good while the process and its probes looked
    /// healthy. Only a closed listener (the server shut down) ends it.
    @Test func theAcceptLoopOutlivesTransientFailures() {
        for code in [EMFILE, ENFILE, ENOBUFS, ENOMEM, EPROTO, ENETDOWN, EHOSTUNREACH] { #expect(HTTPServer.afterAcceptFailure(code) == .backOff, "\(code)") }
        for code in [EINTR, ECONNABORTED] { #expect(HTTPServer.afterAcceptFailure(code) == .retry, "\(code)") }
        for code in [EBADF, EINVAL, ENOTSOCK] { #expect(HTTPServer.afterAcceptFailure(code) == .stop, "\(code)") }
    }

    @Test func theGrammarIsStrictWhereParsersCouldDisagree() async throws {
        let server = try Self.server()
        let port = Int(server.port)
        let refused: [(String, String)] = [
            ("two Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"),
            ("the same Content-Length twice", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nab"),
            ("Transfer-Encoding", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n"),
            ("Transfer-Encoding spelled with a space", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n"),
            ("a header name that is not a token", "GET / HTTP/1.1\r\nHost: a\r\nX Forwarded: a\r\n\r\n"),
            ("a folded header", "GET / HTTP/1.1\r\nHost: a\r\nX-A: a\r\n b\r\n\r\n"),
            ("a signed Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +2\r\n\r\nab"),
            ("a bare LF inside a header", "POST / HTTP/1.1\r\nHost: a\r\nX-A: a\nContent-Length: 2\r\n\r\nab"),
            ("a bare CR", "GET / HTTP/1.1\r\nHost: a\r\nX-A: a\rb\r\n\r\n"),
            ("a control character in a value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: a\u{01}b\r\n\r\n"),
            ("a space in the target", "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n"),
            ("a signature header twice", "GET / HTTP/1.1\r\nHost: a\r\nX-IAP-Signature: v1=a\r\nX-IAP-Signature: v1=b\r\n\r\n"),
            ("an empty Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n"),
            ("an absolute target", "GET http://example.com/ HTTP/1.1\r\nHost: a\r\n\r\n"),
            ("another protocol", "GET / HTTP/2.0\r\n\r\n"),
        ]
        for (why, request) in refused {
            let answer = try await offPool { rawHTTP(port: port, request) }
            #expect(answer.hasPrefix("HTTP/1.1 400") && !answer.contains("Host"), "\(why), not a missing Host: \(answer)")
        }
        let fine = try await offPool { rawHTTP(port: port, "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nX-A:\tb \r\nVia: 1.1 a\r\nVia: 1.1 b\r\n\r\nab") }
        #expect(fine.hasPrefix("HTTP/1.1 200") && fine.hasSuffix("POST /x 2\n"), "\(fine)")
    }

    /// Requests on one connection are answered in turn, pipelined ones too, while the connection is kept alive: until the
    /// client says `Connection: close` or `maxRequestsPerConnection` is reached, then it is closed.
    @Test func aConnectionServesRequestsInTurnUntilEitherSideEndsIt() async throws {
        let server = try Self.server(.init(maxRequestsPerConnection: 3))
        let port = Int(server.port)
        @Sendable func exchange(_ requests: String) -> String {
            let descriptor = rawConnect(port: port, sending: requests)
            defer { close(descriptor) }
            var answer: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true { // until the server closes
                let count = recv(descriptor, &buffer, buffer.count, 0)
                if count <= 0 { break }
                answer += buffer[0..<count]
            }
            return String(decoding: answer, as: UTF8.self)
        }
        let four = try await offPool {
            exchange("GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nxyGET /c HTTP/1.1\r\nHost: a\r\n\r\nGET /d HTTP/1.1\r\nHost: a\r\n\r\n")
        }
        #expect(four.components(separatedBy: "HTTP/1.1 200").count == 4, "three answers: \(four)")
        #expect(four.contains("GET /a 0\n") && four.contains("POST /b 2\n") && four.contains("GET /c 0\n") && !four.contains("/d"), "\(four)")
        #expect(four.components(separatedBy: "Connection: keep-alive").count == 3 && four.components(separatedBy: "Connection: close").count == 2,
                "\(four)")
        let closing = try await offPool { exchange("GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /y HTTP/1.1\r\nHost: a\r\n\r\n") }
        #expect(closing.hasPrefix("HTTP/1.1 200") && closing.contains("GET /x 0\n") && !closing.contains("/y"), "\(closing)")
        let old = try await offPool { exchange("GET /p HTTP/1.0\r\n\r\nGET /q HTTP/1.0\r\n\r\n") }
        #expect(old.contains("GET /p 0\n") && !old.contains("/q"), "HTTP/1.0 closes after each: \(old)")
    }

    /// A client that sends a byte now and then never hits the per-read timeout; the request deadline ends it,
    /// and a normal request meanwhile is served.
    @Test func aTricklingClientIsCutOffAtTheRequestDeadline() async throws {
        let server = try Self.server(.init(readTimeout: .seconds(5), requestTimeout: .seconds(2)))
        let port = Int(server.port)
        let descriptor = rawConnect(port: port, sending: "POST / HTTP/1.1\r\n")
        #expect(descriptor >= 0)
        defer { close(descriptor) }
        // One header byte every 100 ms for 30 s, far longer than the deadline; it counts what it got to send.
        let header = Array(("X-Slow: " + String(repeating: "a", count: 292)).utf8)
        let sent = Locked(0)
        let ended = DispatchSemaphore(value: 0)
        let trickle = Thread {
            defer { ended.signal() }
            for byte in header {
                var value = byte
                if send(descriptor, &value, 1, Int32(MSG_NOSIGNAL)) <= 0 { return }
                sent.withLock { $0 += 1 }
                usleep(100_000)
            }
        }
        trickle.start()
        defer {
            // Ends the trickle, and waits for it, before the descriptor number can be reused.
            shutdown(descriptor, Int32(SHUT_RDWR))
            ended.wait()
        }
        #expect(try await offPool { rawHTTP(port: port, "GET /normal HTTP/1.1\r\nHost: a\r\n\r\n") }.hasPrefix("HTTP/1.1 200"), "served meanwhile")
        let answer = try await offPool { () -> String in
            var buffer = [UInt8](repeating: 0, count: 1024)
            let count = recv(descriptor, &buffer, buffer.count, 0)
            return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : ""
        }
        #expect(answer.hasPrefix("HTTP/1.1 408"), "\(answer)")
        #expect(sent.value < header.count / 2, "cut off at the deadline, long before the trickle ended (\(sent.value) of \(header.count) bytes)")
    }

    @Test func oneAddressCannotTakeEveryConnection() async throws {
        let server = try Self.server(.init(requestTimeout: .seconds(120), maxConnections: 16, maxConnectionsPerAddress: 3))
        let port = Int(server.port)
        let held = (0..<3).map { _ in rawConnect(port: port, sending: "POST / HTTP/1.1\r\nContent-Length: 10\r\n") }
        #expect(held.allSatisfy { $0 >= 0 })
        try await waitUntil("three held", timeout: .seconds(100)) { server.activeConnections == 3 }
        #expect(try await offPool { rawHTTP(port: port, "GET / HTTP/1.1\r\nHost: a\r\n\r\n") }.hasPrefix("HTTP/1.1 503"), "a fourth from the same address")
        held.forEach { close($0) }
        try await waitUntil("released") { server.activeConnections == 0 }
        #expect(try await offPool { rawHTTP(port: port, "GET / HTTP/1.1\r\nHost: a\r\n\r\n") }.hasPrefix("HTTP/1.1 200"))
    }
}

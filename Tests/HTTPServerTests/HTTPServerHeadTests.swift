import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import HTTPServer
import Testing
import TestSupport

/// The request head as README.md and docs/http-server.md document it: at most `maxHeaderBytes`, with the 431 reaching the client; a bare LF
/// refused at once; a `Host` on every HTTP/1.1 request.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct HTTPServerHeadTests {
    /// A whole request head of exactly `size` bytes, blank line included.
    static func head(size: Int) -> String {
        let start = "GET /h HTTP/1.1\r\nHost: a\r\nX-Pad: "
        let end = "\r\n\r\n"
        return start + String(repeating: "p", count: size - start.utf8.count - end.utf8.count) + end
    }

    @Test func theHeadLimitIsExact() async throws {
        let server = try HTTPServerHardeningTests.server()
        let port = Int(server.port)
        let limit = server.configuration.maxHeaderBytes
        let atTheLimit = try await offPool { rawHTTP(port: port, Self.head(size: limit)) }
        #expect(atTheLimit.hasPrefix("HTTP/1.1 200"), "\(atTheLimit)")
        // Up to a read's worth past the limit: the size must be checked within a read, not only before each one.
        for size in [limit + 1, limit + 4096, 2 * limit - 1] {
            let answer = try await offPool { rawHTTP(port: port, Self.head(size: size)) }
            #expect(answer.hasPrefix("HTTP/1.1 431"), "\(size) bytes: \(answer)")
        }
    }

    /// A client that has sent more of a head than the limit gets the 431 and then a clean end of the stream: the
    /// server ends its side after the answer and reads what the client sent before it closes. Closing with those bytes
    /// unread made the kernel reset the connection, which fails a client's further sends (most clients then never read
    /// the answer) and ends its reading with an error.
    @Test func the431ReachesAClientThatSentMoreThanTheLimit() async throws {
        let server = try HTTPServerHardeningTests.server()
        let port = Int(server.port)
        // 40 KiB, all in the socket buffers at once: more than the server reads before it answers.
        let descriptor = rawConnect(port: port, sending: "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: " + String(repeating: "p", count: 40 * 1024))
        #expect(descriptor >= 0)
        defer { close(descriptor) }
        let (answer, ending) = try await offPool { () -> (String, Int32) in
            var answer: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = recv(descriptor, &buffer, buffer.count, 0)
                if count <= 0 { return (String(decoding: answer, as: UTF8.self), count < 0 ? errno : 0) }
                answer += buffer[0..<count]
            }
        }
        #expect(answer.hasPrefix("HTTP/1.1 431"), "\(answer)")
        #expect(ending == 0, "the stream ends cleanly, not with a reset (errno \(ending))")
    }

    /// A head whose lines end in a bare LF is refused as soon as the LF arrives, not once the CRLFCRLF it will never
    /// send is given up on (the read and request timeouts here are far longer: a late answer would be a 408).
    @Test func aBareLineFeedIsRefusedAtOnce() async throws {
        let server = try HTTPServerHardeningTests.server(.init(readTimeout: .seconds(20), requestTimeout: .seconds(20)))
        let port = Int(server.port)
        for request in ["GET / HTTP/1.1\nHost: a\n\n", "GET / HTTP/1.1\r\nHost: a\n\n", "GET / HTTP/1.1\r\nHost: a\r\n\n"] {
            let answer = try await offPool { rawHTTP(port: port, request) }
            #expect(answer.hasPrefix("HTTP/1.1 400") && answer.contains("bare CR or LF"), "\(request.debugDescription): \(answer)")
        }
    }

    /// RFC 9112 §3.2: an HTTP/1.1 request without `Host`, or with one that is not a host and port, is answered 400;
    /// HTTP/1.0 may leave it out.
    @Test func anHTTP11RequestNamesItsHost() async throws {
        let server = try HTTPServerHardeningTests.server()
        let port = Int(server.port)
        let cases: [(String, String)] = [
            ("GET / HTTP/1.1\r\n\r\n", "400"),
            ("GET / HTTP/1.1\r\nX-Host: a\r\n\r\n", "400"),
            ("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "400"),
            ("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", "400"),
            ("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", "400"),
            ("GET / HTTP/1.0\r\n\r\n", "200"),
            ("GET / HTTP/1.1\r\nHost: api.example.com:8080\r\n\r\n", "200"),
            ("GET / HTTP/1.1\r\nhost: 10.0.0.1\r\n\r\n", "200"),
            ("GET / HTTP/1.1\r\nHost: [::1]:9090\r\n\r\n", "200"),
            ("GET / HTTP/1.1\r\nHost:\r\n\r\n", "200"), // an empty host is a valid (empty) reg-name
        ]
        for (request, status) in cases {
            let answer = try await offPool { rawHTTP(port: port, request) }
            #expect(answer.hasPrefix("HTTP/1.1 \(status)"), "\(request.debugDescription): \(answer)")
        }
    }
}

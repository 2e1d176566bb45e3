import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import HTTPServer
import Testing
import TestSupport

/// The bodies the server holds at once stay within `bodyBudgetBytes`: a flood of bodies beyond it is answered 503 with
/// `Retry-After` rather than held, a body over its route's limit is refused on its `Content-Length` alone, and requests
/// without a body (probes) never wait for the budget.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct HTTPServerBodyBudgetTests {
    static let bodyBytes = 16 * 1024

    /// A server whose POST handler holds each request until `release` is signalled, counting those it holds; `/small`
    /// takes bodies of 1 KiB at most.
    static func server(holding held: Locked<Int>, until release: DispatchSemaphore, refusals: Locked<[String]> = Locked([])) throws -> HTTPServer {
        var configuration = HTTPServer.Configuration(maxBodyBytes: 64 * 1024, readTimeout: .seconds(120), requestTimeout: .seconds(120), maxConnections: 64,
                                                     bodyBudgetBytes: 4 * bodyBytes, bodyBudgetPatience: .milliseconds(200),
                                                     bodyLimit: { _, path in path == "/small" ? HTTPServer.BodyLimit(bytes: 1024) : nil })
        configuration.onRefusal = { status, path in refusals.withLock { $0.append("\(status) \(path ?? "-")") } }
        // Synchronous: the handler runs on its connection's thread, which may block.
        return try HTTPServer(configuration: configuration, synchronousHandler: { request in
            if request.method == "POST" {
                held.withLock { $0 += 1 }
                release.wait()
            }
            return HTTPResponse(status: 200, contentType: "text/plain", body: "\(request.method) \(request.path) \(request.body.count)\n")
        })
    }

    /// A POST of `bytes` to `port` in two writes (all but the last byte, then that byte), and the whole answer.
    static func splitPost(port: Int, bytes: Int) -> String {
        let request = Array("POST /flood HTTP/1.1\r\nHost: a\r\nContent-Length: \(bytes)\r\nConnection: close\r\n\r\n".utf8)
            + [UInt8](repeating: UInt8(ascii: "x"), count: bytes)
        let descriptor = rawConnect(port: port, sending: "")
        guard descriptor >= 0 else { return "" }
        defer { close(descriptor) }
        for part in [request.dropLast(), request.suffix(1)] {
            let sent = part.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    let written = send(descriptor, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                    if written <= 0 { return false }
                    offset += written
                }
                return true
            }
            if !sent { break } // answered and closed early: the answer is still read
        }
        return rawReadToEnd(descriptor)
    }

    @Test func aFloodBeyondTheBudgetIsAnswered503WhileProbesAndOversizedBodiesAreAnsweredAtOnce() async throws {
        let held = Locked(0)
        let release = DispatchSemaphore(value: 0)
        let refusals = Locked<[String]>([])
        let server = try Self.server(holding: held, until: release, refusals: refusals)
        let port = Int(server.port)
        let answers = Locked<[String]>([])
        // Twelve bodies of 16 KiB against a budget of four: four are held by the handler, the other eight find no room.
        let flood = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<12 {
                    group.addTask {
                        let answer = try await offPool { Self.splitPost(port: port, bytes: Self.bodyBytes) }
                        answers.withLock { $0.append(answer) }
                    }
                }
                try await group.waitForAll()
            }
        }
        try await waitUntil("four bodies held and eight refused") { held.value == 4 && answers.value.count == 8 }
        let refused = answers.value
        #expect(refused.allSatisfy { $0.hasPrefix("HTTP/1.1 503") && $0.contains("Retry-After: 1\r\n") }, "\(refused)")
        #expect(server.heldBodyBytes == 4 * Self.bodyBytes, "the held bodies' bytes, no more")

        // While the budget is spent: a probe is answered, and bodies over a limit are refused on their Content-Length,
        // without a byte of them sent.
        let health = try await offPool { rawHTTP(port: port, "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n") }
        #expect(health.hasPrefix("HTTP/1.1 200"), "\(health)")
        let overRoute = try await offPool { rawHTTP(port: port, "POST /small HTTP/1.1\r\nHost: a\r\nContent-Length: 1025\r\n\r\n") }
        #expect(overRoute.hasPrefix("HTTP/1.1 413") && overRoute.contains("larger than 1024 bytes"), "\(overRoute)")
        let overServer = try await offPool { rawHTTP(port: port, "POST /flood HTTP/1.1\r\nHost: a\r\nContent-Length: 10485760\r\n\r\n") }
        #expect(overServer.hasPrefix("HTTP/1.1 413") && overServer.contains("larger than 65536 bytes"), "\(overServer)")
        // Each answered before a handler saw it, told with its path (for the caller's request metrics).
        #expect(refusals.value.sorted() == (Array(repeating: "503 /flood", count: 8) + ["413 /flood", "413 /small"]).sorted(), "\(refusals.value)")

        for _ in 0..<4 { release.signal() }
        try await flood.value
        let served = answers.value.filter { $0.hasPrefix("HTTP/1.1 200") }
        #expect(served.count == 4 && served.allSatisfy { $0.hasSuffix("POST /flood \(Self.bodyBytes)\n") }, "\(answers.value)")
        try await waitUntil("every body's bytes given back") { server.heldBodyBytes == 0 }
    }

    /// A body larger than the whole budget could never be held: refused 413 on its Content-Length, not 503 to be retried.
    @Test func aBodyLargerThanTheWholeBudgetIsRefused413() async throws {
        let server = try HTTPServer(configuration: .init(maxBodyBytes: 64 * 1024, bodyBudgetBytes: 1024), synchronousHandler: { _ in HTTPResponse(status: 200) })
        let answer = try await offPool { rawHTTP(port: Int(server.port), "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1025\r\n\r\n") }
        #expect(answer.hasPrefix("HTTP/1.1 413") && answer.contains("larger than 1024 bytes"), "\(answer)")
    }

    /// A body whose connection ends before it arrived gives its bytes back.
    @Test func aConnectionThatDiesMidBodyGivesItsBytesBack() async throws {
        let server = try Self.server(holding: Locked(0), until: DispatchSemaphore(value: 0))
        let descriptor = rawConnect(port: Int(server.port), sending: "POST /flood HTTP/1.1\r\nHost: a\r\nContent-Length: 4096\r\n\r\n" + String(repeating: "x", count: 100))
        #expect(descriptor >= 0)
        try await waitUntil("its body's bytes reserved") { server.heldBodyBytes == 4096 }
        close(descriptor)
        try await waitUntil("given back") { server.heldBodyBytes == 0 }
        #expect(try await offPool { rawHTTP(port: Int(server.port), "GET /after HTTP/1.1\r\nHost: a\r\n\r\n") }.hasPrefix("HTTP/1.1 200"))
    }
}

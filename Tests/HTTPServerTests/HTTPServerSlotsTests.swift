import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import HTTPServer
import Testing
import TestSupport

/// Connection slots under slow clients: with `evictsWaitingConnections` a new connection takes the slot of the one that
/// has waited longest for its request head, so probes are answered however many slow connections there are.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct HTTPServerSlotsTests {
    /// Whether `descriptor` has something to read (an answer, or the server's end of the stream) now.
    static func readable(_ descriptor: Int32) -> Bool {
        var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, 0) > 0
    }

    @Test func aFullServerGivesTheSlotOfTheLongestWaitingHeadToANewConnection() async throws {
        for evicts in [false, true] {
            // Timeouts far longer than the test: a connection that ends here was evicted, not timed out.
            let server = try HTTPServerHardeningTests.server(.init(readTimeout: .seconds(120), requestTimeout: .seconds(120), maxConnections: 4,
                                                                   evictsWaitingConnections: evicts))
            let port = Int(server.port)
            var held: [Int32] = []
            for _ in 0..<4 { held.append(rawConnect(port: port, sending: "GET / HTTP/1.1\r\nHost: a\r\n")) }
            defer { held.forEach { close($0) } }
            #expect(held.allSatisfy { $0 >= 0 })
            try await waitUntil("four held") { server.activeConnections == 4 }
            let answer = try await offPool { rawHTTP(port: port, "GET /new HTTP/1.1\r\nHost: a\r\n\r\n") }
            guard evicts else {
                #expect(answer.hasPrefix("HTTP/1.1 503"), "no slot, no eviction: \(answer)")
                continue
            }
            #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer)")
            let oldest = held[0]
            let evicted = try await offPool { rawReadToEnd(oldest) }
            #expect(evicted.hasPrefix("HTTP/1.1 408"), "the oldest gave its slot: \(evicted)")
            #expect(!held[1...].contains { Self.readable($0) }, "the others keep theirs")
        }
    }

    /// A connection that has sent its head is not evicted while its body arrives; a kept-alive one between requests is.
    @Test func onlyConnectionsWaitingForAHeadAreEvicted() async throws {
        let server = try HTTPServerHardeningTests.server(.init(readTimeout: .seconds(120), requestTimeout: .seconds(120), maxConnections: 2,
                                                               keepAliveTimeout: .seconds(120), evictsWaitingConnections: true))
        let port = Int(server.port)
        let sending = rawConnect(port: port, sending: "POST /body HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nab")
        defer { close(sending) }
        try await waitUntil("its head read") { server.state.withLock { $0.connections.values.contains { $0.waitingSince == nil } } }
        let kept = rawConnect(port: port, sending: "GET /kept HTTP/1.1\r\nHost: a\r\n\r\n")
        defer { close(kept) }
        let first = try await offPool { () -> String in
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = recv(kept, &buffer, buffer.count, 0)
            return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : ""
        }
        #expect(first.hasPrefix("HTTP/1.1 200") && first.contains("keep-alive"), "\(first)")
        try await waitUntil("it waits for its next head") { server.state.withLock { $0.connections.values.count { $0.waitingSince != nil } == 1 } }
        let third = try await offPool { rawHTTP(port: port, "GET /third HTTP/1.1\r\nHost: a\r\n\r\n") }
        #expect(third.hasPrefix("HTTP/1.1 200"), "\(third)")
        #expect(try await offPool { rawReadToEnd(kept) }.isEmpty, "the kept-alive connection, idle, gave its slot")
        _ = "cd".withCString { send(sending, $0, 2, Int32(MSG_NOSIGNAL)) }
        let answer = try await offPool { () -> String in
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = recv(sending, &buffer, buffer.count, 0)
            return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : ""
        }
        #expect(answer.hasPrefix("HTTP/1.1 200") && answer.hasSuffix("POST /body 4\n"), "the body's sender kept its slot: \(answer)")
    }
}

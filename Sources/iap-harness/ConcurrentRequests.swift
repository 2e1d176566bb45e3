import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Requests sent at once over connections of their own, each on a thread of its own (blocking sockets: a thread per
/// request is what holds them all open together, which a pool of a few threads would not), to a server on loopback.
enum ConcurrentRequests {
    /// One request's exchange: when its last byte was sent (nil: it was not), when its answer ended, its status (0: none).
    struct Exchange: Sendable {
        var sent: ContinuousClock.Instant?
        var answered: ContinuousClock.Instant
        var status: Int
        /// Whether the answer said when to retry (`Retry-After`).
        var retryAfter = false
    }

    /// What a run of exchanges says together.
    struct Outcome: Sendable {
        let exchanges: [Exchange]

        /// How many requests got each status.
        var statuses: [Int: Int] { exchanges.reduce(into: [:]) { $0[$1.status, default: 0] += 1 } }

        /// Whether every request was sent whole before the first answer came: all were with the server at once.
        var allInFlightAtOnce: Bool {
            let sent = exchanges.map(\.sent)
            guard let firstAnswer = exchanges.map(\.answered).min(), !sent.contains(where: { $0 == nil }) else { return false }
            return sent.compactMap { $0 }.allSatisfy { $0 <= firstAnswer }
        }
    }

    /// Sends `request` (bytes of a whole HTTP request, `Connection: close`) `count` times at once to 127.0.0.1:`port`; returns
    /// once every answer ended (or its connection failed, or `timeout` passed). `holdLastByte`: each in two writes, all but
    /// its last byte, then, once every request's first write is done (or after `timeout`) and this long after, that byte:
    /// the server gets the rest of every request, and time to read it, before the last byte of any (slow clients).
    static func send(_ request: [UInt8], count: Int, port: Int, timeout: Duration, holdLastByte: Duration? = nil) async -> Outcome {
        let results = Collected()
        let firstWrites = DispatchGroup()
        for _ in 0..<count { firstWrites.enter() }
        let exchanges = await withCheckedContinuation { (done: CheckedContinuation<[Exchange], Never>) in
            for _ in 0..<count {
                let thread = Thread {
                    let exchange = Self.exchange(request, port: port, timeout: timeout, split: holdLastByte.map { (firstWrites, $0) })
                    let all = results.state.withLock { results -> [Exchange]? in
                        results.append(exchange)
                        return results.count == count ? results : nil
                    }
                    if let all { done.resume(returning: all) }
                }
                thread.stackSize = 256 * 1024
                thread.start()
            }
        }
        return Outcome(exchanges: exchanges)
    }

    /// The exchanges so far, from each request's thread.
    private final class Collected: Sendable {
        let state = Mutex<[Exchange]>([])
    }

    /// One request on a connection of its own. With `split`, in two writes as `send` says: it leaves the group after the
    /// first (or once it failed), waits for the group, then holds the last byte as long as it says.
    static func exchange(_ request: [UInt8], port: Int, timeout: Duration, split: (firstWrites: DispatchGroup, hold: Duration)? = nil) -> Exchange {
        let firstWrites = split?.firstWrites
        var leftGroup = false
        func leaveGroup() {
            if let firstWrites, !leftGroup { firstWrites.leave() }
            leftGroup = true
        }
        defer { leaveGroup() }
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { if descriptor >= 0 { close(descriptor) } }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        let connected = descriptor >= 0 && withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else { return Exchange(sent: nil, answered: .now, status: 0) }
        var wait = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        let sentWhole = request.withUnsafeBytes { raw -> Bool in
            var offset = 0
            // The first write ends before the last byte: the second is the last byte alone.
            var end = firstWrites != nil && raw.count > 1 ? raw.count - 1 : raw.count
            while offset < raw.count {
                if offset == end {
                    leaveGroup()
                    _ = firstWrites?.wait(timeout: .now() + .seconds(Int(timeout.components.seconds)))
                    if let hold = split?.hold { usleep(UInt32(hold / .microseconds(1))) }
                    end = raw.count
                }
                let written = Glibc.send(descriptor, raw.baseAddress! + offset, end - offset, Int32(MSG_NOSIGNAL))
                if written < 0 && errno == EINTR { continue }
                if written <= 0 { return false }
                offset += written
            }
            return true
        }
        let sent: ContinuousClock.Instant? = sentWhole ? .now : nil
        // The answer up to the connection's end: the status is the second word of its first line.
        var answer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(descriptor, &chunk, chunk.count, 0)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            answer.append(contentsOf: chunk[0..<count])
        }
        let words = answer.prefix { $0 != UInt8(ascii: "\r") }.split(separator: UInt8(ascii: " "))
        let status = words.count >= 2 ? Int(String(decoding: words[1], as: UTF8.self)) ?? 0 : 0
        let head = String(decoding: answer.prefix(4096), as: UTF8.self).lowercased().components(separatedBy: "\r\n\r\n")[0]
        return Exchange(sent: sent, answered: .now, status: status, retryAfter: head.contains("\r\nretry-after:"))
    }

    /// An HTTP/1.1 POST of `body` to `path`, closing the connection after the answer.
    static func post(_ path: String, body: [UInt8]) -> [UInt8] {
        Array("POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n".utf8) + body
    }
}

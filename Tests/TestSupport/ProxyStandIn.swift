import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// An HTTP proxy as a client sees one, on 127.0.0.1: it records each request it is sent (its target, absolute-form through
/// a proxy: `http://host:port/path`, and its head) and answers it `status` itself, as a proxy passing the origin's answer
/// on would; nothing is forwarded, so nothing leaves the machine and no host name is looked up. One request per
/// connection, served on a thread of its own (not the cooperative pool: it blocks in `accept`).
public final class ProxyStandIn: Sendable {
    public struct Request: Sendable {
        public let target: String
        public let head: String
    }

    public let port: UInt16
    private let listener: Int32
    /// Apart from the stand-in: its thread holds it.
    private final class Log: Sendable {
        let requests = Mutex<[Request]>([])
        let closed = Mutex(false)
    }
    private let log = Log()

    public init(status: Int = 204) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) == 0 && listen(listener, 16) == 0 && getsockname(listener, $0, &length) == 0 }
        }
        guard listener >= 0, bound else {
            close(listener)
            throw POSIXError(.EADDRNOTAVAIL)
        }
        port = UInt16(bigEndian: address.sin_port)
        let thread = Thread { [listener, log] in
            while true {
                let connection = accept(listener, nil, nil)
                if connection < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    return // closed by `shutdown`
                }
                if let request = Self.read(connection) { log.requests.withLock { $0.append(request) } }
                let answer = "HTTP/1.1 \(status) Stand-in\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                _ = answer.withCString { send(connection, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                close(connection)
            }
        }
        thread.name = "proxy-stand-in"
        thread.start()
    }

    /// The requests it was sent, in order.
    public var received: [Request] { log.requests.withLock { $0 } }
    /// Their targets.
    public var targets: [String] { received.map(\.target) }
    public var url: String { "http://127.0.0.1:\(port)" }

    /// Stops accepting: the thread ends.
    public func shutdown() {
        guard log.closed.withLock({ closed in defer { closed = true }; return !closed }) else { return }
        Glibc.shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    deinit { shutdown() }

    /// The head, and as much of the body as `Content-Length` says (read and dropped); nil if the client went away first.
    private static func read(_ connection: Int32) -> Request? {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        let end = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        var wanted = Int.max
        while bytes.count < wanted {
            let count = recv(connection, &buffer, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            bytes += buffer[0..<count]
            if headEnd == nil, let found = (0...max(0, bytes.count - end.count)).first(where: { bytes[$0..<min($0 + end.count, bytes.count)].elementsEqual(end) }) {
                headEnd = found
                let head = String(decoding: bytes[..<found], as: UTF8.self).lowercased()
                let declared = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                wanted = found + end.count + declared
            }
        }
        guard let headEnd else { return nil }
        let head = String(decoding: bytes[..<headEnd], as: UTF8.self)
        let requestLine = head.split(separator: "\r\n").first.map { $0.split(separator: " ") } ?? []
        return Request(target: requestLine.count == 3 ? String(requestLine[1]) : "", head: head)
    }
}

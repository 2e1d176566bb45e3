import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Sends raw bytes and returns what the server answers.
public func rawHTTP(port: Int, _ text: String) -> String {
    let descriptor = rawConnect(port: port, sending: text)
    defer { close(descriptor) }
    guard descriptor >= 0 else { return "" }
    var buffer = [UInt8](repeating: 0, count: 4096)
    let count = recv(descriptor, &buffer, buffer.count, 0)
    return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : ""
}

/// A connection that has sent `text` and stays open (a slow client); -1 if it cannot connect.
public func rawConnect(port: Int, sending text: String) -> Int32 {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = UInt16(port).bigEndian
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
    let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    guard connected == 0 else { close(descriptor); return -1 }
    _ = text.withCString { send(descriptor, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
    return descriptor
}

/// What the server sends on `descriptor` until it closes its side (or resets the connection).
public func rawReadToEnd(_ descriptor: Int32) -> String {
    var answer: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = recv(descriptor, &buffer, buffer.count, 0)
        if count < 0 && errno == EINTR { continue }
        if count <= 0 { break }
        answer += buffer[0..<count]
    }
    return String(decoding: answer, as: UTF8.self)
}

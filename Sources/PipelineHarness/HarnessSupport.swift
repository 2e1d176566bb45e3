import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPClient

/// A run of the harness that cannot go on: a worker that did not start, a condition not met in time.
public struct HarnessError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Polls `check` (nil = done, else what it still waits for) every `interval` (twice a second unless told) until done or
/// `timeout` seconds; tells `say` each new progress and the end. With `stalledAfter`, it also gives up once the progress
/// has not changed for that long: a run whose broker or store died otherwise waits out the whole timeout (ten minutes for
/// a benchmark) saying nothing.
public func waitFor(_ say: (String) -> Void, _ what: String, timeout: TimeInterval, stalledAfter: TimeInterval? = nil,
                    every interval: Duration = .milliseconds(500), _ check: () async throws -> String?) async throws {
    let deadline = Date().addingTimeInterval(timeout)
    var last = ""
    var lastChange = Date()
    while let progress = try await check() {
        if progress != last { say("  … \(progress)"); last = progress; lastChange = Date() }
        guard Date() < deadline else { throw HarnessError("timed out waiting until \(what) (\(progress))") }
        if let stalledAfter, Date().timeIntervalSince(lastChange) >= stalledAfter {
            throw HarnessError("no progress for \(Int(stalledAfter)) s waiting until \(what) (\(progress)): is the broker, the store or a worker down?")
        }
        try await Task.sleep(for: interval)
    }
    say("✓ \(what)")
}

/// `GET http://127.0.0.1:port/path`: the status and body, or status 0 when nothing answered.
public func localHTTPGet(port: Int, path: String) async -> (status: Int, body: String) {
    // The product's own client (libcurl on a thread of its own), not URLSession, which drives libcurl through dispatch
    // sources on its sockets.
    switch await HTTPClient(timeout: .seconds(30), maxConnections: 1).send(HTTPClient.Request(method: "GET", url: "http://127.0.0.1:\(port)\(path)")) {
    case .success(let response): return (response.status, String(decoding: response.body, as: UTF8.self))
    case .failure: return (0, "")
    }
}

/// Sends deliveries `0..<count` to the ingest (its address asked of `ingest` before each round: it may have moved) until
/// each is answered 2xx, as the stores' push services retry, with a growing backoff for at most `timeout` seconds; `send`
/// sends those given to the address and returns the status each was answered (0: none). Returns the deliveries that were
/// retried, those never acknowledged in time, and the answers that refused them (status → count; 0: no answer).
public func deliverUntilAcknowledged(_ count: Int, to ingest: () async throws -> String, timeout: TimeInterval,
                                     send: ([Int], String) async throws -> [Int]) async throws -> (retried: Int, undelivered: Int, refusals: [Int: Int]) {
    var pending = Array(0..<count)
    var retried = Set<Int>()
    var refusals: [Int: Int] = [:]
    var backoff = Duration.milliseconds(100)
    let deadline = Date().addingTimeInterval(timeout)
    while !pending.isEmpty {
        let statuses = try await send(pending, try await ingest())
        let refused = zip(pending, statuses).filter { !(200..<300).contains($0.1) }
        for (_, status) in refused { refusals[status, default: 0] += 1 }
        pending = refused.map(\.0)
        guard !pending.isEmpty, Date() < deadline else { break }
        retried.formUnion(pending)
        try await Task.sleep(for: backoff)
        backoff = min(backoff * 2, .seconds(5))
    }
    return (retried.count, pending.count, refusals)
}

import Foundation

/// Runs a blocking call (a broker round trip, a child process) on a thread of its own and awaits it. Not on a
/// dispatch queue: on Linux Swift's tasks run on the dispatch pool, and blocked calls would take its few threads.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

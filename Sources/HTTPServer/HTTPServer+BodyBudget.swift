import Foundation

/// The bytes of request bodies the server holds in memory at once, over all its connections, kept within a total.
///
/// A body's bytes (its `Content-Length`) are reserved before the first of them is read and given back once its answer
/// was sent, or its connection ended; a body that finds no room waits a moment for some, else it is refused. So however
/// many clients send bodies at once, and however slowly, what their bodies hold stays within the total.
final class BodyBudget: @unchecked Sendable {
    // @unchecked: `held` is read and written only while `condition` is locked.
    private let condition = NSCondition()
    private var held = 0
    /// The most bytes held at once.
    let total: Int

    init(total: Int) { self.total = total }

    /// Bytes reserved now.
    var heldBytes: Int {
        condition.lock()
        defer { condition.unlock() }
        return held
    }

    /// Reserves `bytes`, waiting at most `patience` for room (on the connection's own thread, never the cooperative
    /// pool); false when there was none by then, or when `bytes` is more than the whole budget.
    func reserve(_ bytes: Int, patience: Duration) -> Bool {
        guard bytes <= total else { return false }
        let seconds = Double(patience.components.seconds) + Double(patience.components.attoseconds) / 1e18
        let deadline = Date(timeIntervalSinceNow: seconds)
        condition.lock()
        defer { condition.unlock() }
        while held + bytes > total {
            // Woken by each release; a spurious wake-up or one whose room another took waits again, up to the deadline.
            if !condition.wait(until: deadline) && held + bytes > total { return false }
        }
        held += bytes
        return true
    }

    /// Gives back `bytes` reserved earlier.
    func release(_ bytes: Int) {
        guard bytes > 0 else { return }
        condition.lock()
        held -= bytes
        condition.broadcast()
        condition.unlock()
    }
}

extension HTTPServer {
    /// A route's body limit, below the server's `maxBodyBytes`.
    public struct BodyLimit: Sendable {
        /// The longest body the route takes.
        public var bytes: Int
        /// The 413 a longer body is answered with; nil: the server's own.
        public var refusal: HTTPResponse?

        public init(bytes: Int, refusal: HTTPResponse? = nil) {
            self.bytes = bytes
            self.refusal = refusal
        }
    }

    /// What each connection reads a request head into (its body goes straight into a buffer of its own size).
    static let readBufferBytes = 4 * 1024
}

import Foundation

/// Runs a blocking librdkafka poll loop on a dedicated thread, off Swift's cooperative pool,
/// so that blocking C calls never starve async tasks.
enum PollThread {
    /// Starts `iteration` in a loop on a new thread until it returns `false`, then calls `finished`.
    static func start(name: String, iteration: @escaping @Sendable () -> Bool, finished: @escaping @Sendable () -> Void = {}) {
        let thread = Thread {
            while iteration() {}
            finished()
        }
        thread.name = name
        thread.start()
    }
}

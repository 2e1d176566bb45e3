/// A long-running part of a process (a consumer loop, a scheduler, an HTTP server).
///
/// `run()` works until the service is told to stop with `triggerGracefulShutdown()`, then
/// finishes what it has in hand and returns.
public protocol Service: Sendable {
    func run() async throws
    func triggerGracefulShutdown()
}

import Foundation
import Testing

/// A Tansu broker of the test's own (in memory) behind `broker_proxy.py`: the broker advertises the proxy's address,
/// so every client connection goes through the proxy, which terminates TLS when given a certificate and whose
/// connections a test can cut (`proxy.signal(SIGUSR1)`, then `SIGUSR2`) or hold (`SIGSTOP`, then `SIGCONT`).
public final class ProxiedBroker: Sendable {
    /// The proxy's address, the one clients use.
    public let bootstrapServers: String
    public let proxy: BackgroundProcess
    private let broker: BackgroundProcess

    /// Starts the broker and the proxy, and waits until both listen.
    /// - Parameter tls: the proxy's certificate and key (PEM files), to serve TLS.
    public init(tls: (certificate: String, key: String)? = nil) async throws {
        let python = try TestServices.requirePython()
        let tansu = TestServices.packageRoot.appendingPathComponent(".deps/bin/tansu").path
        try #require(FileManager.default.isExecutableFile(atPath: tansu), "tansu is not installed: make bootstrap")
        let script = TestServices.packageRoot.appendingPathComponent("Tests/TestSupport/broker_proxy.py").path
        (broker, proxy, bootstrapServers) = try await onFreshPorts(2) { ports in
            let (brokerPort, port) = (ports[0], ports[1])
            let broker = try BackgroundProcess(tansu, ["broker", "--listener-url", "tcp://127.0.0.1:\(brokerPort)",
                                                       "--advertised-listener-url", "tcp://127.0.0.1:\(port)"])
            let proxy = try BackgroundProcess(python, [script, "\(port)", "\(brokerPort)"] + (tls.map { [$0.certificate, $0.key] } ?? []))
            try await waitUntil("the broker and its proxy listen") {
                !proxy.isRunning || !broker.isRunning || (proxy.output.contains("listening") && isListening(port: brokerPort))
            }
            guard proxy.isRunning, broker.isRunning else { throw ExitedBeforeListening(proxy.output + broker.output) }
            return (broker, proxy, "127.0.0.1:\(port)")
        }
    }

    public func stop() {
        proxy.stop()
        broker.stop()
    }
}

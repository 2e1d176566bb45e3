import Foundation
import HTTPServer
import Kafka
import PurchaseDomain
import PurchaseEvents
import PurchaseStore
import StageTestSupport
import Synchronization
import Testing
import TestSupport
import WorkerApp

/// `iap-webhooks` built from its file and an environment naming an HTTP proxy (`http_proxy`, as a container or a shell
/// sets it): an endpoint on this machine is sent its events directly, signed, never through the proxy; another goes through
/// it. The proxy is played in the test process (`ProxyStandIn`: it records what reaches it and answers itself): nothing
/// leaves the machine, and no other host's name is looked up.
@Suite struct WebhookProxyTests {
    /// A server keeping the target and the signature of each request it answers 204.
    final class Recorder: Sendable {
        /// Apart from the recorder: the server's handler holds it.
        final class Log: Sendable { let seen = Mutex<[(target: String, signed: Bool)]>([]) }
        let log = Log()
        let server: HTTPServer

        init() throws {
            let log = self.log
            server = try HTTPServer(synchronousHandler: { request in
                log.seen.withLock { $0.append((request.path, request.header("X-IAP-Signature") != nil)) }
                return HTTPResponse(status: 204)
            })
        }

        var targets: [String] { log.seen.withLock { $0.map(\.target) } }
        deinit { server.shutdown() }
    }

    @Test func anEndpointOnThisMachineIsNeverSentThroughTheProxy() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("webhook-proxy-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let proxy = try ProxyStandIn(), sidecar = try Recorder()
        try Data("secret".utf8).write(to: directory.appendingPathComponent("hook.secret"))
        let file = directory.appendingPathComponent("webhooks.json")
        try Data(("""
            {"endpoints": [
              {"name": "sidecar", "url": "http://127.0.0.1:\(sidecar.server.port)/hook", "secretFile": "hook.secret"},
              {"name": "localhost", "url": "http://localhost:\(sidecar.server.port)/named", "secretFile": "hook.secret"},
              {"name": "remote", "url": "http://backend.internal/hook", "secretFile": "hook.secret", "allowPlainHTTP": true}
            ]}
            """).utf8).write(to: file)
        let store = try SQLPurchaseStore(url: "sqlite:" + directory.appendingPathComponent("store.sqlite").path)
        let env = try WorkerApp.embedded(command: "iap-webhooks", settings: Workers.webhooksSettings,
                                         variables: ["KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "IAP_WEBHOOKS_FILE": file.path,
                                                     "http_proxy": proxy.url],
                                         store: store)
        let stages = try Workers.webhookStages(env)
        #expect(stages.map(\.name) == ["webhook-sidecar", "webhook-localhost", "webhook-remote"])
        let granted = ItemGranted(store: .appstore, transactionId: "1001", userId: "user-1", productId: "coins.100", productType: "consumable", quantity: 1,
                                  items: [GrantedItem(kind: .currency, code: "coins", amount: 100, balance: 100)], alreadyGranted: false, grantedAt: Date())
        let message = try StageFixtures.message(granted)
        for stage in stages {
            let result = try await stage.handle(message)
            guard case .publish(let outputs) = result, outputs.isEmpty else { Issue.record("\(stage.name): not delivered: \(result)"); continue }
        }
        #expect(sidecar.targets == ["/hook", "/named"], "the machine's endpoints got theirs directly: \(sidecar.targets)")
        #expect(sidecar.log.seen.withLock { $0.allSatisfy(\.signed) })
        #expect(proxy.targets == ["http://backend.internal/hook"], "only the other host's went through the proxy: \(proxy.targets)")
    }
}

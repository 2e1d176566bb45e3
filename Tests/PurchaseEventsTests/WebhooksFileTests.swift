import Foundation
import JSONSchema
import PurchaseEvents
import Testing
import TestSupport

/// The webhooks file: what it says reaches each endpoint, and what is wrong in it is named by its field or endpoint.
@Suite struct WebhooksFileTests {
    static let schemas = try! JSONSchemaRegistry(directory: TestServices.packageRoot.appendingPathComponent("schemas"))

    func load(_ text: String) throws -> WebhooksFile {
        try WebhooksFile(json: Data(text.utf8), relativeTo: URL(fileURLWithPath: "/etc/iap"), schemas: Self.schemas)
    }

    func error(_ text: String) -> String {
        do { _ = try load(text); return "accepted" } catch { return "\(error)" }
    }

    @Test func theExampleNamesTwoEndpointsWithTheirEventsAndSecrets() throws {
        let file = try WebhooksFile(contentsOf: TestServices.packageRoot.appendingPathComponent("schemas/examples/webhooks.json"), schemas: Self.schemas)
        #expect(file.endpoints.map(\.name) == ["game-backend", "support-desk"])
        #expect(file.endpoints[0].events == [.itemGranted, .purchaseRevoked, .refundDue, .subscriptionStatus])
        #expect(file.endpoints[0].secretFile.path == TestServices.packageRoot.appendingPathComponent("schemas/examples/secrets/webhook-game-backend").path)
        #expect(file.endpoints[0].timeoutSeconds == WebhooksFile.defaultTimeoutSeconds)
        #expect(file.endpoints[1].url.absoluteString == "https://support.example.com/hooks/iap?source=pipeline")
        #expect(file.endpoints[1].secretFile.path == "/run/secrets/webhook-support-desk")
        #expect(file.endpoints[1].timeoutSeconds == 5)
        #expect(file.endpoints[0].connections == 64 && file.endpoints[1].connections == WebhooksFile.defaultConnections)
    }

    @Test func anEndpointWithoutEventsTakesTheDefaultOnes() throws {
        let file = try load(#"{"endpoints": [{"name": "b", "url": "https://b.example/h", "secretFile": "s"}]}"#)
        #expect(file.endpoints[0].events == WebhooksFile.defaultEvents)
        #expect(file.endpoints[0].secretFile.path == "/etc/iap/s")
        #expect(file.endpoints[0].apps == nil, "every app's events")
        let scoped = try load(#"{"endpoints": [{"name": "b", "url": "https://b.example/h", "secretFile": "s", "apps": ["puzzle", "coins-game"]}]}"#)
        #expect(scoped.endpoints[0].apps == ["puzzle", "coins-game"])
        #expect(error(#"{"endpoints": [{"name": "b", "url": "https://b.example/h", "secretFile": "s", "apps": ["Puzzle"]}]}"#).contains("/endpoints/0/apps/0"))
    }

    /// `allowPlainHTTP` is read for the worker, which refuses plain http but to this machine without it.
    @Test func plainHTTPIsAllowedByName() throws {
        #expect(try load(#"{"endpoints": [{"name": "b", "url": "http://backend.internal/h", "secretFile": "s"}]}"#).endpoints[0].allowsPlainHTTP == false)
        #expect(try load(#"{"endpoints": [{"name": "b", "url": "http://backend.internal/h", "secretFile": "s", "allowPlainHTTP": true}]}"#)
            .endpoints[0].allowsPlainHTTP)
    }

    @Test func mistakesAreNamed() {
        #expect(error(#"{"endpoints": [{"name": "b", "url": "https://u:p@b.example/h", "secretFile": "s"}]}"#).contains("user or password"))
        #expect(error(#"{"endpoints": [{"name": "b", "url": "https://b.example/h", "secretFile": "s"}, {"name": "b", "url": "https://c.example/", "secretFile": "t"}]}"#)
            .contains("endpoints[1] ('b'): another endpoint has this name"))
        #expect(error(#"{"endpoints": [{"name": "b", "url": "https://b.example/h", "secretFile": "s", "events": ["purchase.submitted"]}]}"#)
            .contains("/endpoints/0/events/0"))
        #expect(error(#"{"endpoints": [{"name": "B", "url": "https://b.example/h", "secretFile": "s"}]}"#).contains("/endpoints/0/name"))
        #expect(error(#"{"endpoints": [{"name": "b", "url": "ftp://b.example/h", "secretFile": "s"}]}"#).contains("/endpoints/0/url"))
        #expect(error(#"{"endpoints": []}"#).contains("/endpoints"))
        #expect(error(#"{"endpoints": [{"name": "b", "url": "https://b.example/", "secretFile": "s", "connections": 0}]}"#).contains("/endpoints/0/connections"))
        for path in ["/a/../hooks", "/./hooks", "/hooks/.."] {
            #expect(error(#"{"endpoints": [{"name": "b", "url": "https://b.example\#(path)", "secretFile": "s"}]}"#).contains("'.' or '..' segments"), "\(path)")
        }
        #expect(error("{") == "not valid JSON")
    }
}

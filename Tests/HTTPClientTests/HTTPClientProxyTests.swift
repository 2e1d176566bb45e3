import Foundation
import HTTPClient
import HTTPServer
import Synchronization
import Testing
import TestSupport

/// Which proxy the client's requests go through, a proxy played in the test process (`ProxyStandIn`: it records what
/// reaches it and answers it itself): nothing leaves the machine. The proxy is given to each client as the environment's
/// variables would be, never set on the test process.
@Suite struct HTTPClientProxyTests {
    /// An endpoint keeping the target of each request it answers.
    final class Recorder: Sendable {
        /// Apart from the recorder: the server's handler holds it.
        final class Log: Sendable { let targets = Mutex<[String]>([]) }
        let log = Log()
        let server: HTTPServer

        init(status: Int) throws {
            let log = self.log
            server = try HTTPServer(synchronousHandler: { request in
                log.targets.withLock { $0.append(request.path) }
                return HTTPResponse(status: status)
            })
        }

        var url: String { "http://127.0.0.1:\(server.port)" }
        var seen: [String] { log.targets.withLock { $0 } }
        deinit { server.shutdown() }
    }

    /// The status `proxy`'s client gets for a POST to the endpoint, and who saw it.
    func post(_ proxy: HTTPClient.Proxy, endpoint: Recorder, path: String = "/hook") async throws -> Int {
        let client = HTTPClient(timeout: .seconds(5), maxConnections: 1, proxy: proxy)
        return try await client.send(.init(method: "POST", url: endpoint.url + path, body: Array("{}".utf8))).get().status
    }

    @Test func theEnvironmentsProxyIsReadAsCurlReadsIt() async throws {
        let proxy = try ProxyStandIn(status: 202), endpoint = try Recorder(status: 204)
        // `http_proxy` alone: the request goes to the proxy, absolute-form, and the endpoint never sees it.
        #expect(try await post(.environment(["http_proxy": proxy.url]), endpoint: endpoint) == 202)
        #expect(proxy.targets == [endpoint.url + "/hook"] && endpoint.seen.isEmpty, "\(proxy.targets) \(endpoint.seen)")
        // A NO_PROXY that names another host: still the proxy.
        #expect(try await post(.environment(["http_proxy": proxy.url, "NO_PROXY": "127.0.0.2,backend.internal"]), endpoint: endpoint) == 202)
        #expect(proxy.targets.count == 2 && endpoint.seen.isEmpty)
        // `all_proxy` when no scheme's own is set.
        #expect(try await post(.environment(["ALL_PROXY": proxy.url]), endpoint: endpoint) == 202)
        #expect(proxy.targets.count == 3 && endpoint.seen.isEmpty)

        // Direct: to a host NO_PROXY names (lower or upper case, a name or a CIDR range); with `HTTP_PROXY` alone (curl
        // takes only the lower-case name for http); with an https proxy only; with a variable set empty; with none.
        let direct: [[String: String]] = [
            ["http_proxy": proxy.url, "no_proxy": "127.0.0.1"], ["http_proxy": proxy.url, "NO_PROXY": "localhost,127.0.0.0/8"],
            ["http_proxy": proxy.url, "no_proxy": "*"], ["HTTP_PROXY": proxy.url], ["https_proxy": proxy.url, "HTTPS_PROXY": proxy.url],
            ["http_proxy": "", "ALL_PROXY": proxy.url], [:],
        ]
        for variables in direct {
            #expect(try await post(.environment(variables), endpoint: endpoint, path: "/direct") == 204, "\(variables)")
        }
        #expect(endpoint.seen == Array(repeating: "/direct", count: direct.count), "\(endpoint.seen)")
        #expect(proxy.targets.count == 3, "\(proxy.targets)")
        #expect(try await post(.none, endpoint: endpoint) == 204)
        #expect(proxy.targets.count == 3)
    }

    /// The client reads no variable but through its `Proxy`: `.none` goes directly whatever the process's environment
    /// says, and a proxy given explicitly is used with its own exceptions alone.
    @Test func anExplicitProxyIsUsedWithItsExceptionsAlone() async throws {
        let proxy = try ProxyStandIn(status: 202), endpoint = try Recorder(status: 204)
        #expect(HTTPClient.Proxy.environment(["http_proxy": proxy.url, "no_proxy": "a.example"])
                    == HTTPClient.Proxy(http: proxy.url, https: nil, noProxy: "a.example"))
        #expect(HTTPClient.Proxy.environment(["https_proxy": "http://p:3128", "all_proxy": "socks5h://s:1080"])
                    == HTTPClient.Proxy(http: "socks5h://s:1080", https: "http://p:3128", noProxy: ""))
        #expect(try await post(.init(http: proxy.url), endpoint: endpoint) == 202)
        #expect(try await post(.init(http: proxy.url, noProxy: "127.0.0.1"), endpoint: endpoint) == 204)
        #expect(proxy.targets.count == 1 && endpoint.seen.count == 1)
    }

    /// A failure names no URL: a store API's path carries a purchase token, and failures are logged.
    @Test func aFailureDoesNotNameTheURL() async throws {
        let token = "tok-" + UUID().uuidString
        let client = HTTPClient(timeout: .seconds(5), maxConnections: 1, proxy: .none)
        let answer = await client.send(.init(method: "GET", url: "http://127.0.0.1:1/purchases/products/coins.100/tokens/\(token)"))
        guard case .failure(let failure) = answer else { Issue.record("port 1 answered: \(answer)"); return }
        #expect(!failure.description.contains(token) && !failure.description.contains("127.0.0.1"), "\(failure)")
    }
}

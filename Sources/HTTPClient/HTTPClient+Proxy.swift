import Foundation

extension HTTPClient {
    /// The proxy a client's requests go through. libcurl is always told it (and its exceptions), so it reads no variable
    /// of its own: what a client does is what its `Proxy` says, whatever the process's environment holds.
    public struct Proxy: Sendable, Equatable {
        /// The proxy of `http` URLs; nil: none.
        public var http: String?
        /// The proxy of `https` URLs; nil: none.
        public var https: String?
        /// The hosts reached directly all the same, as curl reads `NO_PROXY`: comma-separated host names (each matching
        /// itself and the names under it), IP addresses, CIDR ranges, or `*` for every host.
        public var noProxy: String

        public init(http: String? = nil, https: String? = nil, noProxy: String = "") {
            self.http = http
            self.https = https
            self.noProxy = noProxy
        }

        /// Every request directly.
        public static let none = Proxy()

        /// The proxies `variables` name, read as curl reads them: `http_proxy` for `http` URLs (in lower case only: a CGI
        /// program's `HTTP_PROXY` is a request's `Proxy` header), `https_proxy` then `HTTPS_PROXY` for `https` URLs, either
        /// falling back on `all_proxy` then `ALL_PROXY`; `no_proxy` then `NO_PROXY` for the hosts reached directly. A
        /// variable set but empty means no proxy.
        public static func environment(_ variables: [String: String] = ProcessInfo.processInfo.environment) -> Proxy {
            func first(_ names: String...) -> String? {
                guard let value = names.lazy.compactMap({ variables[$0] }).first else { return nil }
                return value.isEmpty ? nil : value
            }
            return Proxy(http: first("http_proxy", "all_proxy", "ALL_PROXY"), https: first("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"),
                         noProxy: first("no_proxy", "NO_PROXY") ?? "")
        }

        /// The proxy of `url` (before `noProxy`, which libcurl applies): by its scheme, in any case.
        func proxy(of url: String) -> String? {
            let scheme = url.utf8.prefix { $0 != UInt8(ascii: ":") }
            func named(_ name: String) -> Bool {
                scheme.count == name.utf8.count && zip(scheme, name.utf8).allSatisfy { $0 | 0x20 == $1 }
            }
            return named("https") ? https : named("http") ? http : nil
        }
    }
}

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension URLSession {
    /// A session for calls to a store's API: each request bounded by `timeout`, connections kept alive between calls,
    /// and nothing cached or stored. Store API answers are never reused, and on Linux a session's default `URLCache`
    /// looks each request up on disk (`perf` put that, with cookie handling, at a fifth of the finisher's CPU).
    static func storeAPI(timeout: Duration) -> URLSession {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout.seconds
        configuration.timeoutIntervalForResource = timeout.seconds
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        return URLSession(configuration: configuration)
    }
}

import HTTPClient

extension HTTPClient {
    /// The client of a store's API: each request bounded by `timeout`, up to 16 at once over connections kept alive.
    static func storeAPI(timeout: Duration) -> HTTPClient { HTTPClient(timeout: timeout, maxConnections: 16) }
}

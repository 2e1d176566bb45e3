import Foundation
import HTTPClient

extension HTTPClient {
    /// The client of a store's API: each request bounded by `timeout`, up to 16 at once over connections kept alive.
    static func storeAPI(timeout: Duration) -> HTTPClient { HTTPClient(timeout: timeout, maxConnections: 16) }
}

extension CharacterSet {
    /// Unreserved characters (RFC 3986): anything else in a query value or a path segment is percent-encoded.
    static let urlUnreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}

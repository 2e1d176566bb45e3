import Foundation
import HTTPClient

/// What became of one call to a store's API, as operators count them (`iap_store_api_requests_total`): the class of its
/// answer, or no answer. A bounded set, whatever the store answers.
public enum StoreAPIOutcome: String, Sendable, CaseIterable {
    /// 2xx.
    case ok
    /// 429: the store's rate limit.
    case rateLimited
    /// 401 or 403: credentials or permissions an operator must fix.
    case unauthorized
    /// 404 or 410: the store knows no such thing (any more).
    case notFound
    /// Any other 4xx.
    case clientError
    /// 5xx, and any other status neither a success nor a client error (a redirect, which is not followed).
    case serverError
    /// No HTTP answer: the connection failed, timed out, or the answer was too large or malformed.
    case unreachable

    /// The outcome of a call that ended with `answer`.
    public init(_ answer: Result<HTTPClient.Response, HTTPClient.Failure>) {
        guard case .success(let response) = answer else {
            self = .unreachable
            return
        }
        self = switch response.status {
        case 200...299: .ok
        case 429: .rateLimited
        case 401, 403: .unauthorized
        case 404, 410: .notFound
        case 400...499: .clientError
        default: .serverError
        }
    }
}

/// Told the outcome of every call a store client makes to its store's API, by the task that made it, once the answer (or
/// its absence) is in: keep it short, it runs per call. The workers count the calls by store; this module knows nothing of
/// their metrics.
public typealias StoreAPIObserver = @Sendable (StoreAPIOutcome) -> Void

/// The connection of a store client to its store's API: each request bounded by `timeout`, up to `maxConnections` at
/// once over connections kept alive, and each call's outcome told to `observer`.
public struct StoreAPISession: Sendable {
    private let http: HTTPClient
    private let observer: StoreAPIObserver?

    /// - Parameter observer: told the outcome of each call; nil: nobody is.
    public init(timeout: Duration, maxConnections: Int = 16, observer: StoreAPIObserver?) {
        http = HTTPClient(timeout: timeout, maxConnections: maxConnections)
        self.observer = observer
    }

    /// Sends `request` (`HTTPClient.send(_:)`) and tells the observer what became of it.
    public func send(_ request: HTTPClient.Request) async -> Result<HTTPClient.Response, HTTPClient.Failure> {
        let answer = await http.send(request)
        observer?(StoreAPIOutcome(answer))
        return answer
    }

    /// Sends `requests` as one batch (`HTTPClient.send(all:)`) and tells the observer what became of each.
    public func send(all requests: [HTTPClient.Request]) async -> [Result<HTTPClient.Response, HTTPClient.Failure>] {
        let answers = await http.send(all: requests)
        if let observer { for answer in answers { observer(StoreAPIOutcome(answer)) } }
        return answers
    }
}

extension CharacterSet {
    /// Unreserved characters (RFC 3986): anything else in a query value or a path segment is percent-encoded.
    static let urlUnreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}

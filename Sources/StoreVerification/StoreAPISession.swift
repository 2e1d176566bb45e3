import Foundation
import HTTPClient
import JSON
import PurchaseDomain
import Synchronization

/// Why a call to a store's API (the App Store Server API, the Android Publisher API) did not succeed: the same two
/// outcomes for every store client.
public enum StoreAPIFailure: Error, Sendable, Equatable {
    /// Retry later: the network, a timeout, 429, 5xx, or credentials or permissions an operator must fix; not before
    /// `retryAfter` when the API said how long to wait (`Retry-After`, or a wait it asked for earlier that still runs).
    case unavailable(String, retryAfter: Duration? = nil)
    /// The API refused the request about this purchase or transaction (unknown, no longer valid, a state or a value it
    /// does not take); status 0: refused before any request (a name that cannot be sent).
    case refused(status: Int, detail: String)
}

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
/// once over connections kept alive, and each call's outcome told to `observer`. The wait an answer asks for (`429` or
/// `503` with `Retry-After`) is kept, to the millisecond, for every call of the client: its calls ask `holdsCalls()`
/// first and make none before the time.
public struct StoreAPISession: Sendable {
    private let http: HTTPClient
    private let observer: StoreAPIObserver?
    private let now: @Sendable () -> Date
    /// Until when the API asked not to be called; shared by the copies of the session.
    private let heldUntil: Held

    private final class Held: Sendable {
        let until = Mutex<Date?>(nil)
    }

    /// - Parameter observer: told the outcome of each call; nil: nobody is.
    public init(timeout: Duration, maxConnections: Int = 16, observer: StoreAPIObserver?, now: @escaping @Sendable () -> Date = Date.init) {
        http = HTTPClient(timeout: timeout, maxConnections: maxConnections)
        self.observer = observer
        self.now = now
        heldUntil = Held()
    }

    /// Sends `request` (`HTTPClient.send(_:)`) and tells the observer what became of it.
    public func send(_ request: HTTPClient.Request) async -> Result<HTTPClient.Response, HTTPClient.Failure> {
        let answer = await http.send(request)
        observer?(StoreAPIOutcome(answer))
        remember(answer)
        return answer
    }

    /// Sends `requests` as one batch (`HTTPClient.send(all:)`) and tells the observer what became of each.
    public func send(all requests: [HTTPClient.Request]) async -> [Result<HTTPClient.Response, HTTPClient.Failure>] {
        let answers = await http.send(all: requests)
        if let observer { for answer in answers { observer(StoreAPIOutcome(answer)) } }
        answers.forEach(remember)
        return answers
    }

    /// The failure every call meets while the API's wait runs (`api` names the API), or nil when calls may be made.
    public func holdsCalls(_ api: String) -> StoreAPIFailure? {
        let date = now()
        guard let until = heldUntil.until.withLock({ $0 }), until > date else { return nil }
        let milliseconds = Int64((until.timeIntervalSince(date) * 1000).rounded(.up))
        return .unavailable("\(api) asked to wait; no call before \(RFC3339.format(until))", retryAfter: .milliseconds(milliseconds))
    }

    /// What an answer's `Retry-After` asks of the calls that follow it (only a `429` or `503` holds them).
    private func remember(_ answer: Result<HTTPClient.Response, HTTPClient.Failure>) {
        guard case .success(let response) = answer, response.status == 429 || response.status == 503 else { return }
        let date = now()
        guard let wait = Self.wait(response.retryAfter, now: date), wait > .zero else { return }
        let until = date.addingTimeInterval(Double(wait.components.seconds) + Double(wait.components.attoseconds) / 1e18)
        heldUntil.until.withLock { $0 = max($0 ?? until, until) }
    }

    /// How long to wait before calling again, from `Retry-After`: Apple sends the UNIX time, in milliseconds, from which
    /// a request is accepted again (the client reads any number as seconds); Google and a proxy send seconds, taken as
    /// they are. At most `longestWait`: a value beyond it (a bad proxy's, a time in seconds) must not stop the calls for
    /// good.
    public static func wait(_ retryAfter: Duration?, now: Date) -> Duration? {
        guard let retryAfter else { return nil }
        let value = retryAfter.components.seconds
        // Beyond 10^10 seconds (over 300 years) the number is a time in milliseconds, not a wait.
        guard value > 10_000_000_000 else { return min(retryAfter, longestWait) }
        let milliseconds = max(0, value - EpochMilliseconds.milliseconds(now))
        return min(.milliseconds(milliseconds), longestWait)
    }

    /// The longest wait a `Retry-After` is taken for: the stores' rate limits are per hour at most.
    public static let longestWait: Duration = .seconds(3600)
}

extension CharacterSet {
    /// Unreserved characters (RFC 3986): anything else in a query value or a path segment is percent-encoded.
    static let urlUnreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}

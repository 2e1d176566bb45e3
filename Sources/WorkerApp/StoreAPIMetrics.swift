import Metrics
import PurchaseDomain
import StoreVerification

/// `iap_store_api_requests_total{store,outcome}`: every call a process makes to a store's API, by outcome
/// (`StoreAPIOutcome`), counted by the observers its store clients are built with.
enum StoreAPIMetrics {
    static let name = "iap_store_api_requests_total"

    /// The observer of the calls to `store`'s API, counting them in `metrics` (nil: no observer): the family is declared
    /// and `store`'s `ok` series is at 0 from now on, so that `rate()` has a series from the first scrape. Ask for it where
    /// a client of `store` is built, so that only the stores the process calls are reported.
    static func observer(_ store: Store, _ metrics: MetricsRegistry?) -> StoreAPIObserver? {
        guard let metrics else { return nil }
        metrics.declare(name, .counter, help: "Calls to a store's API (Google's token endpoint and signing keys count as googleplay), by store and outcome "
                            + "(ok, rateLimited, unauthorized, notFound, clientError, serverError, unreachable); alert on the errors and 429s.")
        // Each outcome's series named once: a call costs a lookup and an increment, no labels built.
        let series = Dictionary(uniqueKeysWithValues: StoreAPIOutcome.allCases.map {
            ($0, metrics.series(name, ["store": store.rawValue, "outcome": $0.rawValue]))
        })
        if let ok = series[.ok] { metrics.increment(ok, by: 0) }
        return { outcome in
            if let key = series[outcome] { metrics.increment(key) }
        }
    }
}

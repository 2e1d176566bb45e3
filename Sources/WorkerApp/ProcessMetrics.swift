import Foundation
import PurchaseDomain
import Metrics
import PurchaseStore
import Synchronization
import WorkerRuntime

/// Purchases by state, those of unknown product type, and the age of the oldest unfinished one, read from the store.
/// The age is the signal that matters for the deadline: it should stay well below it. The purchase figures are split by
/// `store`, and by `app` for purchases recorded with one (a deployment with an apps file): a bounded label, since the
/// verifier records only the apps the file names. A store or app once reported stays reported, at zero when it has
/// nothing any more; each store is reported from the start.
///
/// A scrape reads only what partial indexes hold: the purchases verified or granted, and those of unknown type. The
/// other states (finished, rejected, refund_due, revoked) hold nearly every purchase ever recorded, and
/// counting them reads the whole table (at two million purchases, half a second of the database per scrape and per
/// process): they are counted at most once per `totalsInterval` and reported as last counted in between.
enum StoreMetrics {
    /// - Parameter stages: the stages this process runs: their parked series start at zero.
    /// - Parameter totalsInterval: how long the closed states' counts are reported before they are counted again.
    static func register(store: SQLPurchaseStore, metrics: MetricsRegistry, stages: [String], totalsInterval: TimeInterval,
                         now: @escaping @Sendable () -> Date = Date.init) {
        let reported = Mutex(Set(stages))
        let reportedStores = Mutex(Set(Store.allCases.map { StoreAndApp(store: $0) }))
        let openStates = Lifecycle.openStates // read at each scrape; the others as last counted
        // The last count, and the tickets of counts begun and of the one stored: overlapping scrapes keep the latest begun.
        let totals = Mutex<(last: (counts: [StoreAndApp: [PurchaseState: Int]], countedAt: Date)?, begun: Int, stored: Int)>((nil, 0, 0))
        metrics.declare("iap_purchases", .gauge,
                        help: "Purchases in the store, by state, store and app: verified and granted as of the scrape, the others as last counted (see --store-totals-interval).")
        metrics.declare("iap_oldest_unfinished_purchase_age_seconds", .gauge,
                        help: "Age of the oldest purchase verified or granted but not finished, by store and app (0 when none); each store has its own deadline.")
        metrics.declare("iap_store_up", .gauge, help: "1 when the last read of the store succeeded.")
        metrics.declare("iap_purchases_unknown_product_type", .gauge,
                        help: "Purchases whose product type is unknown (recorded before types were kept; never flagged): name them in the catalog.")
        metrics.declare("iap_consumption_reports_waiting", .gauge,
                        help: "The app's consumption reports kept for purchases not recorded yet (alert when one stays: wrong ids, or a lost submission).")
        metrics.declare("iap_unclaimed_charges", .gauge,
                        help: "Charges the store announced that no submission claimed yet (an app that died after the payment), by store and app; flagged at their deadline.")
        metrics.declare("iap_oldest_unclaimed_charge_age_seconds", .gauge, help: "Age of the oldest unclaimed charge, by store and app (0 when none).")
        metrics.declare("iap_parked_messages", .gauge, help: "Messages parked on the retry topic and not re-driven yet, by stage (alert when above 0).")
        metrics.declare("iap_oldest_parked_message_age_seconds", .gauge, help: "Age of the oldest parked message, by stage (0 when none).")
        metrics.addCollector { metrics in
            let time = now()
            do {
                let open = try await store.openStatistics()
                let parked = try await StoreParkingLedger(store: store).parkedByStage()
                // Every stage reported once keeps being reported, at zero when nothing of it is parked any more.
                for stage in reported.withLock({ $0.formUnion(parked.keys); return $0 }) {
                    metrics.set("iap_parked_messages", ["stage": stage], to: Double(parked[stage]?.count ?? 0))
                    metrics.set("iap_oldest_parked_message_age_seconds", ["stage": stage],
                                to: parked[stage].map { max(0, time.timeIntervalSince($0.oldest)) } ?? 0)
                }
                let keys = reportedStores.withLock { $0.formUnion(open.byStoreAndApp.keys); return $0 }
                for key in keys {
                    let figures = open.byStoreAndApp[key] ?? .init()
                    for state in openStates {
                        metrics.set("iap_purchases", labels(key, ["state": state.rawValue]), to: Double(figures.byState[state] ?? 0))
                    }
                    metrics.set("iap_oldest_unfinished_purchase_age_seconds", labels(key),
                                to: figures.oldestUnfinished.map { max(0, time.timeIntervalSince($0)) } ?? 0)
                    metrics.set("iap_unclaimed_charges", labels(key), to: Double(figures.unclaimedCharges))
                    metrics.set("iap_oldest_unclaimed_charge_age_seconds", labels(key),
                                to: figures.oldestUnclaimed.map { max(0, time.timeIntervalSince($0)) } ?? 0)
                }
                metrics.set("iap_purchases_unknown_product_type", to: Double(open.unknownProductType))
                metrics.set("iap_consumption_reports_waiting", to: Double(open.consumptionReportsWaiting))
                metrics.set("iap_store_up", to: 1)
            } catch {
                // Keep the last values; the outage itself is the series to alert on.
                metrics.set("iap_store_up", to: 0)
                return
            }
            var counted = totals.withLock { $0.last }
            // Due once the interval has passed (or the clock went back past the last count).
            if counted.map({ !(0..<totalsInterval).contains(time.timeIntervalSince($0.countedAt)) }) ?? true {
                let ticket = totals.withLock { $0.begun += 1; return $0.begun }
                do {
                    let counts = try await store.purchaseCounts()
                    counted = totals.withLock { totals in
                        if ticket > totals.stored { (totals.last, totals.stored) = ((counts, time), ticket) }
                        return totals.last
                    }
                } catch {
                    // The last count stays reported; tried again at the next scrape.
                    metrics.set("iap_store_up", to: 0)
                }
            }
            guard let counted else { return } // never counted yet: no figure rather than a zero
            for key in reportedStores.withLock({ $0.formUnion(counted.counts.keys); return $0 }) {
                for state in PurchaseState.recorded where !openStates.contains(state) {
                    metrics.set("iap_purchases", labels(key, ["state": state.rawValue]), to: Double(counted.counts[key]?[state] ?? 0))
                }
            }
        }
    }

    /// A store and app's labels: `store`, and `app` when the purchases were recorded with one.
    static func labels(_ key: StoreAndApp, _ others: [String: String] = [:]) -> [String: String] {
        var labels = others
        labels["store"] = key.store.rawValue
        if let app = key.app { labels["app"] = app.rawValue }
        return labels
    }
}

/// Consumer lag per assigned partition, from librdkafka's statistics.
enum ConsumerMetrics {
    static func register(runners: [StageRunner], metrics: MetricsRegistry) {
        guard !runners.isEmpty else { return }
        metrics.declare("iap_consumer_lag", .gauge, help: "Messages not yet consumed per assigned partition (-1 until known).")
        metrics.declare("iap_assigned_partitions", .gauge, help: "Partitions assigned to this process, by consumer group.")
        metrics.addCollector { metrics in
            metrics.reset("iap_consumer_lag")
            for runner in runners {
                let consumer = runner.kafkaConsumer
                metrics.set("iap_assigned_partitions", ["group": consumer.groupID], to: Double(consumer.assignment.count))
                for (partition, lag) in consumer.lag {
                    metrics.set("iap_consumer_lag", ["group": consumer.groupID, "topic": partition.topic, "partition": String(partition.partition)],
                                to: Double(lag))
                }
            }
        }
    }
}

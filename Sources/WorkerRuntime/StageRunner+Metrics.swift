import Foundation
import Kafka
import Metrics
import Synchronization

/// The runner's metrics and test counters.
extension StageRunner {
    /// The runner's metric families (declared by every stage, so that dashboards find them at zero).
    public static func declareMetrics(_ metrics: MetricsRegistry) {
        metrics.declare("iap_messages_total", .counter, help: "Input messages done, by stage and outcome (handled, deadLettered).")
        metrics.declare("iap_retries_total", .counter, help: "Transient failures retried, by stage.")
        metrics.declare("iap_dead_letters_total", .counter, help: "Messages dead-lettered, by stage and reason.")
        metrics.declare("iap_handler_duration_seconds", .histogram, help: "Time from taking a message to its outputs acknowledged, retries included.")
        metrics.declare("iap_in_flight_messages", .gauge, help: "Messages being handled now.")
        metrics.declare("iap_publish_duration_seconds", .histogram, help: "Time from sending a message's outputs to the broker's acknowledgement.")
        metrics.declare("iap_parked_total", .counter, help: "Messages parked on the retry topic (retry budget spent, or behind a parked message of their key), by stage.")
        metrics.declare("iap_redriven_total", .counter, help: "Parked messages the re-driver handed back to the stage and saw done, by stage.")
        metrics.declare("iap_batches_total", .counter, help: "Runs of several waiting messages handed to the stage at once, by stage.")
        metrics.declare("iap_batch_size", .histogram, help: "Messages of a partition the stage decided together (one store transaction; one handled alone is a batch of one), by stage.",
                        buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
        metrics.declare("iap_batches_cut_total", .counter,
                        help: "Batches the stage answered only in part (e.g. rolled back after a failure), the rest handled alone or batched again, by stage.")
        metrics.declare("iap_events_published_total", .counter,
                        help: "Events the stage published and the broker took, by stage and CloudEvents type (e.g. iap.purchase.rejected.v1: the verifier's rejections).")
        metrics.declare("iap_rechecks_total", .counter, help: "Answered messages set aside to be asked about again (e.g. a pending payment), by stage.")
        metrics.declare("iap_crashes_found_total", .counter,
                        help: "Partitions resumed after a crash left messages in hand (they then go to the stage one at a time), by stage.")
    }

    func count(_ name: String, reason: String? = nil) {
        counters.withLock { $0[name, default: 0] += 1 }
        switch name {
        case "retries": metrics.increment("iap_retries_total", ["stage": stage.name])
        case "parked": metrics.increment("iap_parked_total", ["stage": stage.name])
        case "redriven": metrics.increment("iap_redriven_total", ["stage": stage.name])
        case "rechecks": metrics.increment("iap_rechecks_total", ["stage": stage.name])
        case "crashesFound": metrics.increment("iap_crashes_found_total", ["stage": stage.name])
        case "batches": metrics.increment("iap_batches_total", ["stage": stage.name])
        case "batchesCut": metrics.increment("iap_batches_cut_total", ["stage": stage.name])
        case "handled": metrics.increment(series.handled)
        default:
            metrics.increment("iap_messages_total", ["stage": stage.name, "outcome": name])
            if let reason { metrics.increment("iap_dead_letters_total", ["stage": stage.name, "reason": reason]) }
        }
    }
}

/// The series of a stage that every message updates, named once.
struct StageSeries: Sendable {
    let inFlight, handlerDuration, publishDuration, batchSize: MetricsRegistry.SeriesKey
    /// `iap_messages_total{outcome="handled"}` (see `StageRunner.count`).
    let handled: MetricsRegistry.SeriesKey
    /// `iap_events_published_total{stage,type}` by the `ce_type` header's bytes, each named once: the count runs for every
    /// output, and naming a series (labels sorted, keys built) cost more than the rest of a message's metrics.
    let published: PublishedSeries

    init(_ metrics: MetricsRegistry, stage: String) {
        published = PublishedSeries(metrics, stage: stage)
        inFlight = metrics.series("iap_in_flight_messages", ["stage": stage])
        handlerDuration = metrics.series("iap_handler_duration_seconds", ["stage": stage])
        publishDuration = metrics.series("iap_publish_duration_seconds", ["stage": stage])
        batchSize = metrics.series("iap_batch_size", ["stage": stage])
        handled = metrics.series("iap_messages_total", ["stage": stage, "outcome": "handled"])
    }

    /// A message taken at `started` is in flight until the returned closure is called, which times it.
    func begin(_ metrics: MetricsRegistry, started: ContinuousClock.Instant) -> @Sendable () -> Void {
        metrics.increment(inFlight)
        return { [inFlight, handlerDuration] in
            metrics.increment(inFlight, by: -1)
            metrics.observe(handlerDuration, duration: ContinuousClock.now - started)
        }
    }
}

/// The `iap_events_published_total` series of one stage, by CloudEvents type, named at their first use.
final class PublishedSeries: Sendable {
    private let metrics: MetricsRegistry
    private let stage: String
    private let byType = Mutex<[Data: MetricsRegistry.SeriesKey]>([:])

    init(_ metrics: MetricsRegistry, stage: String) {
        self.metrics = metrics
        self.stage = stage
    }

    /// Counts each of `messages` that carries a `ce_type` (parked records and the like carry none of their own).
    func count(_ messages: [KafkaProducerMessage]) {
        for message in messages {
            guard let type = message.headers.first(where: { $0.key == "ce_type" })?.value else { continue }
            let series = byType.withLock { known in
                if let series = known[type] { return series }
                let series = metrics.series("iap_events_published_total", ["stage": stage, "type": String(decoding: type, as: UTF8.self)])
                known[type] = series
                return series
            }
            metrics.increment(series)
        }
    }
}

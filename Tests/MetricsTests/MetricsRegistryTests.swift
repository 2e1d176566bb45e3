import Metrics
import Testing

/// What `/metrics` renders from updates made by name and labels or through a series named once: the same series,
/// histograms counted per bucket.
@Suite struct MetricsRegistryTests {
    @Test func updatesByNameAndThroughASeriesKeyReachTheSameSeries() async {
        let metrics = MetricsRegistry()
        metrics.declare("jobs_total", .counter, help: "Jobs.")
        metrics.declare("job_seconds", .histogram, help: "Job time.", buckets: [0.1, 1])
        let done = metrics.series("jobs_total", ["stage": "granter", "outcome": "handled"])
        metrics.increment(done)
        metrics.increment("jobs_total", ["outcome": "handled", "stage": "granter"], by: 2)
        metrics.increment("jobs_total", ["stage": "granter", "outcome": "failed"])
        #expect(metrics.value("jobs_total", ["stage": "granter", "outcome": "handled"]) == 3)
        let seconds = metrics.series("job_seconds", ["stage": "granter"])
        metrics.observe(seconds, 0.05)
        metrics.observe(seconds, duration: .milliseconds(500))
        metrics.observe("job_seconds", ["stage": "granter"], 4)
        let text = await metrics.render()
        for line in ["jobs_total{outcome=\"handled\",stage=\"granter\"} 3", "jobs_total{outcome=\"failed\",stage=\"granter\"} 1",
                     "job_seconds_bucket{stage=\"granter\",le=\"0.1\"} 1", "job_seconds_bucket{stage=\"granter\",le=\"1\"} 2",
                     "job_seconds_bucket{stage=\"granter\",le=\"+Inf\"} 3", "job_seconds_sum{stage=\"granter\"} 4.55",
                     "job_seconds_count{stage=\"granter\"} 3"] {
            #expect(text.contains(line + "\n"), "\(line) in:\n\(text)")
        }
    }
}

import Foundation
import Synchronization

/// Counters, gauges and histograms of one process, rendered in the Prometheus text exposition format
/// (version 0.0.4) for `/metrics`.
///
/// Metric families are declared once with their help text; series are created on first use with their
/// labels. Values that are cheaper to read than to track (purchases by state, consumer lag) are set by
/// collectors, which run just before each rendering.
public final class MetricsRegistry: Sendable {
    public enum Kind: String, Sendable {
        case counter, gauge, histogram
    }

    /// Latency buckets in seconds, from a millisecond to a minute.
    public static let latencyBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]

    private struct Family {
        let help: String
        let kind: Kind
        let buckets: [Double]
        var series: [Labels: Series] = [:]
    }

    private struct Series {
        var value: Double = 0
        /// Histograms: cumulative counts per bucket upper bound (the last is +Inf).
        var bucketCounts: [UInt64] = []
        var sum: Double = 0
        var count: UInt64 = 0

        mutating func observe(_ value: Double, _ buckets: [Double]) {
            for (index, bound) in buckets.enumerated() where value <= bound { bucketCounts[index] += 1 }
            bucketCounts[buckets.count] += 1
            sum += value
            count += 1
        }
    }

    /// A series named once, family and labels, for a hot path (a message handled) that would otherwise build and sort
    /// its label set at every update.
    public struct SeriesKey: Sendable, Hashable {
        fileprivate let name: String
        fileprivate let labels: Labels
    }

    /// Label pairs sorted by name, so that the same labels given in any order are one series.
    fileprivate struct Labels: Hashable, Comparable, Sendable {
        let pairs: [LabelPair]
        init(_ labels: [String: String]) { pairs = labels.sorted { $0.key < $1.key }.map { LabelPair(name: $0.key, value: $0.value) } }
        static func < (a: Labels, b: Labels) -> Bool { a.pairs.lexicographicallyPrecedes(b.pairs) }
    }

    fileprivate struct LabelPair: Hashable, Comparable, Sendable {
        let name: String
        let value: String
        static func < (a: LabelPair, b: LabelPair) -> Bool { (a.name, a.value) < (b.name, b.value) }
    }

    public typealias Collector = @Sendable (MetricsRegistry) async -> Void

    private let families = Mutex<[String: Family]>([:])
    private let collectors = Mutex<[Collector]>([])

    public init() {}

    /// Declares a metric family. Declaring it again keeps the first declaration.
    public func declare(_ name: String, _ kind: Kind, help: String, buckets: [Double] = MetricsRegistry.latencyBuckets) {
        families.withLock { families in
            if families[name] == nil { families[name] = Family(help: help, kind: kind, buckets: kind == .histogram ? buckets.sorted() : []) }
        }
    }

    /// The series of family `name` with `labels`, to update through.
    public func series(_ name: String, _ labels: [String: String] = [:]) -> SeriesKey { SeriesKey(name: name, labels: Labels(labels)) }

    /// Adds `amount` to a counter (or gauge).
    public func increment(_ name: String, _ labels: [String: String] = [:], by amount: Double = 1) {
        increment(series(name, labels), by: amount)
    }

    /// Adds `amount` to a counter (or gauge) series.
    public func increment(_ series: SeriesKey, by amount: Double = 1) {
        update(series) { $0.value += amount }
    }

    /// Sets a gauge.
    public func set(_ name: String, _ labels: [String: String] = [:], to value: Double) {
        update(series(name, labels)) { $0.value = value }
    }

    /// Removes every series of a gauge family, e.g. before a collector sets the current partitions' lag.
    public func reset(_ name: String) {
        families.withLock { $0[name]?.series = [:] }
    }

    /// Records one observation in a histogram.
    public func observe(_ name: String, _ labels: [String: String] = [:], _ value: Double) {
        observe(series(name, labels), value)
    }

    /// Records one observation in a histogram series.
    public func observe(_ key: SeriesKey, _ value: Double) {
        families.withLock { families in
            guard let family = families[key.name], family.kind == .histogram else { return }
            let buckets = family.buckets
            // Changed in place: a copy of the family taken out and put back would copy its series on every observation.
            families[key.name]?.series[key.labels, default: Series(bucketCounts: Array(repeating: 0, count: buckets.count + 1))].observe(value, buckets)
        }
    }

    /// Records a duration, in seconds, in a histogram.
    public func observe(_ name: String, _ labels: [String: String] = [:], duration: Duration) {
        observe(series(name, labels), duration: duration)
    }

    /// Records a duration, in seconds, in a histogram series.
    public func observe(_ key: SeriesKey, duration: Duration) {
        observe(key, Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18)
    }

    /// The current value of a counter or gauge series (nil if it has none yet).
    public func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        let key = series(name, labels)
        return families.withLock { $0[key.name]?.series[key.labels]?.value }
    }

    /// Runs `collector` before every rendering to refresh values read from elsewhere.
    public func addCollector(_ collector: @escaping Collector) {
        collectors.withLock { $0.append(collector) }
    }

    /// The Prometheus text format of every family, after running the collectors.
    public func render() async -> String {
        for collector in collectors.withLock({ $0 }) { await collector(self) }
        let snapshot = families.withLock { $0 }
        var out = ""
        for (name, family) in snapshot.sorted(by: { $0.key < $1.key }) {
            out += "# HELP \(name) \(family.help)\n# TYPE \(name) \(family.kind.rawValue)\n"
            for (labels, series) in family.series.sorted(by: { $0.key < $1.key }) {
                switch family.kind {
                case .counter, .gauge:
                    out += "\(name)\(Self.format(labels.pairs)) \(Self.format(series.value))\n"
                case .histogram:
                    for (index, bound) in (family.buckets + [.infinity]).enumerated() {
                        let le = LabelPair(name: "le", value: bound.isInfinite ? "+Inf" : Self.format(bound))
                        out += "\(name)_bucket\(Self.format(labels.pairs + [le])) \(series.bucketCounts[index])\n"
                    }
                    out += "\(name)_sum\(Self.format(labels.pairs)) \(Self.format(series.sum))\n"
                    out += "\(name)_count\(Self.format(labels.pairs)) \(series.count)\n"
                }
            }
        }
        return out
    }

    private func update(_ key: SeriesKey, _ body: (inout Series) -> Void) {
        families.withLock { families in
            if families[key.name] == nil { families[key.name] = Family(help: key.name, kind: .gauge, buckets: []) }
            body(&families[key.name]!.series[key.labels, default: Series()])
        }
    }

    private static func format(_ pairs: [LabelPair]) -> String {
        guard !pairs.isEmpty else { return "" }
        return "{" + pairs.map { "\($0.name)=\"\(escape($0.value))\"" }.joined(separator: ",") + "}"
    }

    /// Label values escape backslash, double quote and newline.
    private static func escape(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
    }

    private static func format(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}

import Foundation
import Kafka
import Metrics
import Synchronization

/// Watches the consumer groups of a process's stages, so that a rebalance cannot stall silently, and has a stalled
/// member join again.
///
/// Two kinds of stall, each past `bound`:
/// - *This member without partitions.* With eager assignment a member has none while a rebalance is under way; one
///   that does not complete shows as a member without partitions for long — unless its group has more members than
///   the most partitions of its topics, which makes it an idle extra replica (nothing to do, nothing wrong). When
///   the group cannot be described, idle and stalled cannot be told apart, and the one that matters is the stall.
/// - *This member holding another slice than its `range` share* in a stable group (see `judgeOwnership`):
///   partitions owned by no member, e.g. a coordinator that gave a dead member's slice to no one.
///
/// A stall is reported by `iap_group_stalled{group}` (1), an error log line when it begins (info when it ends), and
/// readiness false with the reason. Then the member rejoins as a new one (`KafkaConsumer.rejoinGroup()`, at most
/// once per bound, counted in `iap_group_rejoins_total`; not when the group could not be described): a new member makes the coordinator start a new generation
/// and assign every partition anew, which is what the local broker (Tansu 0.6) needs to leave such a state.
/// The clock paces the looks and times mismatched shares (generic so that tests can drive it); how long a member
/// has been without partitions is the consumer's own measure.
public final class GroupWatchdog<C: Clock>: Service where C.Duration == Duration {
    public struct Configuration: Sendable {
        /// How long a member may be without partitions, or hold another slice than its share, before it counts as stalled.
        public var bound: Duration = .seconds(60)
        /// How often the groups are looked at.
        public var interval: Duration = .seconds(5)
        public init() {}
    }

    /// What the watchdog last found about a group.
    public enum Status: Sendable, Equatable {
        case assigned
        /// Without partitions for less than the bound: joining, or in a rebalance.
        case joining
        /// Without partitions, and rightly: more members than partitions.
        case idle(members: Int, partitions: Int)
        case stalled(String)
    }

    /// What the group coordinator and the cluster say about a consumer's group: its description, and the partition
    /// count of each of its topics (blocking calls).
    public typealias Describe = @Sendable (KafkaConsumer) throws -> (group: KafkaGroupDescription, partitions: [String: Int])

    private struct State {
        var statuses: [String: Status] = [:]
        var describeFailures: [String: Int] = [:]
        /// Since when this member has held another slice than its share.
        var mismatchedSince: [String: C.Instant] = [:]
        var lastRejoin: [String: C.Instant] = [:]
        var stopping = false
    }

    private let consumers: [KafkaConsumer]
    private let describe: Describe
    private let rejoin: @Sendable (KafkaConsumer) -> Void
    private let configuration: Configuration
    private let clock: C
    private let logger: Logger
    private let metrics: MetricsRegistry
    private let state = Mutex(State())

    /// - Parameters:
    ///   - describe: `describing(with:)` asks the cluster through an admin client of its own.
    ///   - rejoin: what a stalled member does (tests observe it).
    public init(consumers: [KafkaConsumer], configuration: Configuration = Configuration(), clock: C, logger: Logger, metrics: MetricsRegistry,
                describe: @escaping Describe, rejoin: @escaping @Sendable (KafkaConsumer) -> Void = { $0.rejoinGroup() }) {
        self.consumers = consumers
        self.describe = describe
        self.rejoin = rejoin
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
        self.metrics = metrics
        metrics.declare("iap_group_stalled", .gauge,
                        help: "1 while this member has been without partitions, or held another slice than its share, past the bound.")
        metrics.declare("iap_group_rejoins_total", .counter, help: "Times this process rejoined a stalled group as a new member.")
        for consumer in consumers { metrics.set("iap_group_stalled", ["group": consumer.groupID], to: 0) }
    }

    /// The last finding for `group` (nil before the first look).
    public func status(of group: String) -> Status? { state.withLock { $0.statuses[group] } }

    /// The cluster's answers through `admin` (a handle of its own: see `KafkaAdmin.describeGroup`).
    public static func describing(with admin: KafkaAdmin) -> Describe {
        { consumer in
            let topics = try admin.metadata(timeout: .seconds(5)).topics.filter { consumer.topics.contains($0.key) }
            return (try admin.describeGroup(consumer.groupID), topics)
        }
    }

    /// Nil (ready) when every consumer has partitions and is not stalled, or was last judged an idle extra replica;
    /// otherwise why not.
    public var readiness: Readiness? {
        state.withLock { state in
            for consumer in consumers {
                switch state.statuses[consumer.groupID] {
                case .stalled(let reason): return .notReady(reason)
                case .idle: continue
                case .assigned, .joining, nil:
                    if consumer.withoutPartitionsFor != nil { return .notReady("no partitions assigned to \(consumer.groupID) yet") }
                }
            }
            return nil
        }
    }

    public func run() async throws {
        while !state.withLock({ $0.stopping }) {
            for consumer in consumers { await look(at: consumer) }
            try await clock.sleep(for: configuration.interval, unless: { state.withLock { $0.stopping } })
        }
    }

    public func triggerGracefulShutdown() { state.withLock { $0.stopping = true } }

    /// Looks at `consumer`'s group once; a stalled member rejoins.
    public func look(at consumer: KafkaConsumer) async {
        let group = consumer.groupID
        // Whether a stall found calls for a rejoin: not when the group could not be described (an idle replica
        // rejoining would only make its whole group rebalance).
        let (status, mayRejoin): (Status, Bool)
        if let without = consumer.withoutPartitionsFor {
            state.withLock { $0.mismatchedSince[group] = nil }
            (status, mayRejoin) = without < configuration.bound ? (.joining, false) : await judge(consumer, without: without)
        } else {
            (status, mayRejoin) = (await judgeOwnership(consumer), true)
        }
        let now = clock.now
        let (previous, rejoinDue) = state.withLock { state in
            defer { state.statuses[group] = status }
            guard case .stalled = status, mayRejoin else { return (state.statuses[group], false) }
            let due = state.lastRejoin[group].map { $0.duration(to: now) >= configuration.bound } ?? true
            if due {
                state.lastRejoin[group] = now
                state.mismatchedSince[group] = nil
            }
            return (state.statuses[group], due)
        }
        if case .stalled(let reason) = status {
            metrics.set("iap_group_stalled", ["group": group], to: 1)
            if case .stalled = previous {} else { logger.error("consumer group stalled", ["group": group, "reason": reason]) }
            if rejoinDue {
                logger.warning("rejoining the stalled group as a new member", ["group": group])
                metrics.increment("iap_group_rejoins_total", ["group": group])
                rejoin(consumer)
            }
        } else {
            metrics.set("iap_group_stalled", ["group": group], to: 0)
            if case .stalled = previous { logger.info("consumer group no longer stalled", ["group": group]) }
        }
    }

    /// A member with partitions: stalled when, in a stable group, it has held other partitions than its `range` share
    /// past the bound. `range` sorts the members by id and gives each a contiguous slice of every topic; a member
    /// holding another slice than the group's members make its own means partitions owned twice or, what happens,
    /// by nobody (a coordinator that gave a dead member's slice to no one). Judged from this member's own assignment:
    /// the local broker describes members without theirs.
    private func judgeOwnership(_ consumer: KafkaConsumer) async -> Status {
        let group = consumer.groupID
        let described: (group: KafkaGroupDescription, partitions: [String: Int])
        do {
            described = try await describeGroup(of: consumer)
        } catch {
            // This member works; that the group cannot be described now says nothing against it.
            state.withLock { $0.mismatchedSince[group] = nil }
            return .assigned
        }
        // Within a rebalance the members' shares are in flux; only a stable group's count.
        guard described.group.state == "Stable", let memberID = consumer.memberID else {
            state.withLock { $0.mismatchedSince[group] = nil }
            return .assigned
        }
        let members = described.group.members.map(\.memberID)
        let assignment = consumer.assignment
        let mismatched = consumer.topics.compactMap { topic -> String? in
            let partitions = described.partitions[topic] ?? 0
            let held = assignment.filter { $0.topic == topic }
            guard partitions > 0 else { return nil }
            let share = Self.rangeShare(of: memberID, among: members, topic: topic, partitions: partitions)
            if share == held { return nil }
            return "\(Self.names(held)) of \(topic)'s \(partitions), its share being \(share.map(Self.names) ?? "none (not a member)")"
        }
        let now = clock.now
        guard !mismatched.isEmpty else {
            state.withLock { $0.mismatchedSince[group] = nil }
            return .assigned
        }
        let since = state.withLock { state in
            if state.mismatchedSince[group] == nil { state.mismatchedSince[group] = now }
            return state.mismatchedSince[group] ?? now
        }
        guard since.duration(to: now) >= configuration.bound else { return .assigned }
        return .stalled("\(group): this member has held \(mismatched.joined(separator: "; ")) for \(Int(since.duration(to: now).components.seconds)) s "
                        + "in a stable group of \(members.count): partitions left to nobody by a rebalance")
    }

    /// `describe`, off the concurrency pool (it blocks on the cluster).
    private func describeGroup(of consumer: KafkaConsumer) async throws -> (group: KafkaGroupDescription, partitions: [String: Int]) {
        let describe = self.describe
        return try await onOwnThread { try describe(consumer) }
    }

    /// What `range` assigns `member` of `topic`'s partitions among `members`: sorted by id, the k-th of n gets the
    /// k-th run of ⌊P/n⌋ partitions, the first P mod n one more. Nil when `member` is not among them.
    static func rangeShare(of member: String, among members: [String], topic: String, partitions: Int) -> Set<TopicPartition>? {
        let sorted = members.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } // librdkafka compares the bytes
        guard let k = sorted.firstIndex(of: member) else { return nil }
        let (each, extra) = partitions.quotientAndRemainder(dividingBy: sorted.count)
        let start = k * each + min(k, extra)
        return Set((start..<(start + each + (k < extra ? 1 : 0))).map { TopicPartition(topic: topic, partition: Int32($0)) })
    }

    private static func names(_ partitions: Set<TopicPartition>) -> String {
        partitions.isEmpty ? "no partition" : "[" + partitions.map(\.partition).sorted().map(String.init).joined(separator: ",") + "]"
    }

    /// A member without partitions past the bound: idle when its group has more members than partitions, else stalled.
    /// - Returns: also whether the group was described (a stall found without a description is only reported).
    private func judge(_ consumer: KafkaConsumer, without: Duration) async -> (Status, described: Bool) {
        let seconds = Int(without.components.seconds)
        do {
            let (group, counts) = try await describeGroup(of: consumer)
            state.withLock { $0.describeFailures[consumer.groupID] = nil }
            // With range assignment a member gets a partition of every topic with more partitions than its place.
            let partitions = counts.values.max() ?? 0
            let memberCount = group.members.count
            if partitions > 0 && memberCount > partitions { return (.idle(members: memberCount, partitions: partitions), true) }
            return (.stalled("\(consumer.groupID): no partitions for \(seconds) s, though the group has \(memberCount) member(s) "
                             + "for \(partitions) partition(s) per topic: a rebalance that does not complete"), true)
        } catch {
            // A failed description or two do not turn an idle replica into a stalled one.
            let (previous, failures) = state.withLock { state in
                state.describeFailures[consumer.groupID, default: 0] += 1
                return (state.statuses[consumer.groupID], state.describeFailures[consumer.groupID] ?? 0)
            }
            if case .idle = previous, failures < 3, let previous {
                logger.warning("cannot describe the group; still taken as idle", ["group": consumer.groupID, "error": "\(error)"])
                return (previous, false)
            }
            return (.stalled("\(consumer.groupID): no partitions for \(seconds) s, and the group cannot be described (\(error))"), false)
        }
    }
}

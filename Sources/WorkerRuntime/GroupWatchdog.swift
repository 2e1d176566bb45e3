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
/// - *This member holding another slice than its `range` share* in a stable group (`RangeShare`): partitions owned
///   by no member, e.g. a coordinator that gave a dead member's slice to no one.
///
/// A stall is reported by `iap_group_stalled{group}` (1), an error log line when it begins (info when it ends), and
/// readiness false with the reason. Then, unless `rejoinsWhenStalled` is off, the member rejoins as a new one (`KafkaConsumer.rejoinGroup()`, at most
/// once per bound, counted in `iap_group_rejoins_total`; not when the group could not be described): a new member makes the coordinator start a new generation
/// and assign every partition anew, which is what the local broker (Tansu 0.6) needs to leave such a state.
/// The clock paces the looks and times mismatched shares (generic so that tests can drive it); how long a member
/// has been without partitions is the consumer's own measure. What the watchdog remembers of each group, and decides
/// from it, is `Stall`'s (`GroupWatchdog+Stall.swift`); this class asks the cluster, logs, counts and rejoins.
public final class GroupWatchdog<C: Clock>: Service where C.Duration == Duration {
    public struct Configuration: Sendable {
        /// How long a member may be without partitions, or hold another slice than its share, before it counts as stalled.
        public var bound: Duration = .seconds(60)
        /// How often the groups are looked at.
        public var interval: Duration = .seconds(5)
        /// Whether a stalled member rejoins its group as a new member. A broker that completes every rebalance never
        /// needs it; the local broker (Tansu 0.6) does to leave a rebalance it did not complete. Off, a stall is only
        /// reported.
        public var rejoinsWhenStalled = true
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
        /// By group id.
        var stalls: [String: Stall] = [:]
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
    public func status(of group: String) -> Status? { state.withLock { $0.stalls[group]?.status } }

    /// Changes and reads what the watchdog remembers of `group`.
    private func stall<T>(_ group: String, _ body: (inout Stall) -> T) -> T {
        let bound = configuration.bound
        return state.withLock { body(&$0.stalls[group, default: Stall(bound: bound)]) }
    }

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
                switch state.stalls[consumer.groupID]?.status {
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
        // Whether a stall found calls for a rejoin: not when the group could not be described.
        let (status, mayRejoin): (Status, Bool)
        if let without = consumer.withoutPartitionsFor {
            stall(group) { $0.holdsShare() }
            (status, mayRejoin) = without < configuration.bound ? (.joining, false) : await judge(consumer, without: without)
        } else {
            (status, mayRejoin) = (await judgeOwnership(consumer), true)
        }
        let now = clock.now
        let outcome = stall(group) { $0.found(status, mayRejoin: mayRejoin && configuration.rejoinsWhenStalled, at: now) }
        if case .stalled(let reason) = status {
            metrics.set("iap_group_stalled", ["group": group], to: 1)
            if outcome.stallBegins { logger.error("consumer group stalled", ["group": group, "reason": reason]) }
            if outcome.rejoin {
                logger.warning("rejoining the stalled group as a new member", ["group": group])
                metrics.increment("iap_group_rejoins_total", ["group": group])
                rejoin(consumer)
            }
        } else {
            metrics.set("iap_group_stalled", ["group": group], to: 0)
            if outcome.stallEnds { logger.info("consumer group no longer stalled", ["group": group]) }
        }
    }

    /// A member with partitions: stalled when, in a stable group, it has held other partitions than its `range` share
    /// (`RangeShare`) past the bound. Judged from this member's own assignment: the local broker describes members
    /// without theirs.
    private func judgeOwnership(_ consumer: KafkaConsumer) async -> Status {
        let group = consumer.groupID
        let described: (group: KafkaGroupDescription, partitions: [String: Int])
        do {
            described = try await describeGroup(of: consumer)
        } catch {
            // This member works; that the group cannot be described now says nothing against it.
            stall(group) { $0.holdsShare() }
            return .assigned
        }
        // Within a rebalance the members' shares are in flux; only a stable group's count.
        guard described.group.state == "Stable", let memberID = consumer.memberID else {
            stall(group) { $0.holdsShare() }
            return .assigned
        }
        let members = described.group.members.map(\.memberID)
        let mismatches = RangeShare(members: members).mismatches(of: memberID, holding: consumer.assignment, topics: consumer.topics,
                                                                 partitions: described.partitions)
        guard !mismatches.isEmpty else {
            stall(group) { $0.holdsShare() }
            return .assigned
        }
        let now = clock.now
        let held = stall(group) { $0.holdsOtherSlice(at: now) }
        guard held >= configuration.bound else { return .assigned }
        return .stalled("\(group): this member has held \(mismatches.map(\.description).joined(separator: "; ")) for \(Int(held.components.seconds)) s "
                        + "in a stable group of \(members.count): partitions left to nobody by a rebalance")
    }

    /// `describe`, off the concurrency pool (it blocks on the cluster).
    private func describeGroup(of consumer: KafkaConsumer) async throws -> (group: KafkaGroupDescription, partitions: [String: Int]) {
        let describe = self.describe
        return try await onOwnThread { try describe(consumer) }
    }

    /// A member without partitions past the bound: idle when its group has more members than partitions, else stalled.
    /// - Returns: also whether the group was described (a stall found without a description is only reported).
    private func judge(_ consumer: KafkaConsumer, without: Duration) async -> (Status, described: Bool) {
        let seconds = Int(without.components.seconds)
        do {
            let (group, counts) = try await describeGroup(of: consumer)
            stall(consumer.groupID) { $0.described() }
            let partitions = counts.values.max() ?? 0
            let memberCount = group.members.count
            if RangeShare.hasIdleMembers(members: memberCount, mostPartitions: partitions) {
                return (.idle(members: memberCount, partitions: partitions), true)
            }
            return (.stalled("\(consumer.groupID): no partitions for \(seconds) s, though the group has \(memberCount) member(s) "
                             + "for \(partitions) partition(s) per topic: a rebalance that does not complete"), true)
        } catch {
            if let idle = stall(consumer.groupID, { $0.describeFailed() }) {
                logger.warning("cannot describe the group; still taken as idle", ["group": consumer.groupID, "error": "\(error)"])
                return (idle, false)
            }
            return (.stalled("\(consumer.groupID): no partitions for \(seconds) s, and the group cannot be described (\(error))"), false)
        }
    }
}

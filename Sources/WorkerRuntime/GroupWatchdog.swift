import Foundation
import Kafka
import Metrics
import Synchronization

/// Watches the consumer groups of a process's stages, so that a rebalance cannot stall silently.
///
/// With eager assignment a member has no partitions while a rebalance is under way; a rebalance that does not
/// complete, or one that leaves partitions to nobody, shows as a member without partitions for long. So a member
/// without partitions for longer than `bound` is *stalled* — unless its group has more members than the most
/// partitions of its topics, which makes it an idle extra replica (nothing to do, nothing wrong). When the group
/// cannot be described, a member without partitions past the bound is reported stalled too: idle and stalled
/// cannot be told apart, and the one that matters is the stall. A stall is reported by `iap_group_stalled{group}`
/// (1), an error log line when it begins (info when it ends), and readiness false with the reason.
/// The clock paces the looks (generic so that tests can drive it); how long a member has been without partitions is
/// the consumer's own measure.
public final class GroupWatchdog<C: Clock>: Service where C.Duration == Duration {
    public struct Configuration: Sendable {
        /// How long a member may be without partitions before it counts as stalled.
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

    /// What the group coordinator and the cluster say about a consumer's group: its members, and the partition count
    /// of each of its topics (blocking calls).
    public typealias Describe = @Sendable (KafkaConsumer) throws -> (members: Int, partitions: [String: Int])

    private let consumers: [KafkaConsumer]
    private let describe: Describe
    private let configuration: Configuration
    private let clock: C
    private let logger: Logger
    private let metrics: MetricsRegistry
    private let state = Mutex<(statuses: [String: Status], describeFailures: [String: Int], stopping: Bool)>(([:], [:], false))

    /// - Parameter describe: asked only of a member without partitions past the bound; `describing(with:)` asks the
    ///   cluster through an admin client of its own.
    public init(consumers: [KafkaConsumer], configuration: Configuration = Configuration(), clock: C, logger: Logger, metrics: MetricsRegistry,
                describe: @escaping Describe) {
        self.consumers = consumers
        self.describe = describe
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
        self.metrics = metrics
        metrics.declare("iap_group_stalled", .gauge,
                        help: "1 while this member has been without partitions past the bound although its group has no more members than partitions.")
        for consumer in consumers { metrics.set("iap_group_stalled", ["group": consumer.groupID], to: 0) }
    }

    /// The last finding for `group` (nil before the first look).
    public func status(of group: String) -> Status? { state.withLock { $0.statuses[group] } }

    /// The cluster's answers through `admin` (a handle of its own: see `KafkaAdmin.groupMemberCount`).
    public static func describing(with admin: KafkaAdmin) -> Describe {
        { consumer in
            let topics = try admin.metadata(timeout: .seconds(5)).topics.filter { consumer.topics.contains($0.key) }
            return (try admin.groupMemberCount(consumer.groupID), topics)
        }
    }

    /// Nil (ready) when every consumer has partitions now, or was last judged an idle extra replica; otherwise why not.
    public var readiness: Readiness? {
        state.withLock { state in
            for consumer in consumers where consumer.withoutPartitionsFor != nil {
                switch state.statuses[consumer.groupID] {
                case .stalled(let reason): return .notReady(reason)
                case .idle: continue
                case .assigned, .joining, nil: return .notReady("no partitions assigned to \(consumer.groupID) yet")
                }
            }
            return nil
        }
    }

    public func run() async throws {
        while !state.withLock({ $0.stopping }) {
            for consumer in consumers { await look(at: consumer) }
            let deadline = clock.now.advanced(by: configuration.interval)
            while clock.now < deadline, !state.withLock({ $0.stopping }) {
                try await clock.sleep(until: min(deadline, clock.now.advanced(by: .milliseconds(100))), tolerance: nil)
            }
        }
    }

    public func triggerGracefulShutdown() { state.withLock { $0.stopping = true } }

    /// Looks at `consumer`'s group once.
    public func look(at consumer: KafkaConsumer) async {
        let group = consumer.groupID
        let status: Status
        if let without = consumer.withoutPartitionsFor {
            if without < configuration.bound {
                status = .joining
            } else {
                status = await judge(consumer, without: without)
            }
        } else {
            status = .assigned
        }
        let previous = state.withLock { state in
            defer { state.statuses[group] = status }
            return state.statuses[group]
        }
        if case .stalled(let reason) = status {
            metrics.set("iap_group_stalled", ["group": group], to: 1)
            if case .stalled = previous {} else { logger.error("consumer group stalled", ["group": group, "reason": reason]) }
        } else {
            metrics.set("iap_group_stalled", ["group": group], to: 0)
            if case .stalled = previous { logger.info("consumer group no longer stalled", ["group": group]) }
        }
    }

    private func judge(_ consumer: KafkaConsumer, without: Duration) async -> Status {
        let seconds = Int(without.components.seconds)
        do {
            let describe = self.describe
            let (memberCount, counts) = try await onOwnThread { try describe(consumer) }
            state.withLock { $0.describeFailures[consumer.groupID] = nil }
            // With range assignment a member gets a partition of every topic with more partitions than its place.
            let partitions = counts.values.max() ?? 0
            if partitions > 0 && memberCount > partitions { return .idle(members: memberCount, partitions: partitions) }
            return .stalled("\(consumer.groupID): no partitions for \(seconds) s, though the group has \(memberCount) member(s) "
                            + "for \(partitions) partition(s) per topic: a rebalance that does not complete")
        } catch {
            // A failed description or two do not turn an idle replica into a stalled one.
            let (previous, failures) = state.withLock { state in
                state.describeFailures[consumer.groupID, default: 0] += 1
                return (state.statuses[consumer.groupID], state.describeFailures[consumer.groupID] ?? 0)
            }
            if case .idle = previous, failures < 3, let previous {
                logger.warning("cannot describe the group; still taken as idle", ["group": consumer.groupID, "error": "\(error)"])
                return previous
            }
            return .stalled("\(consumer.groupID): no partitions for \(seconds) s, and the group cannot be described (\(error))")
        }
    }
}

import Foundation
import Kafka
import Metrics
import Synchronization

/// Watches the consumer groups of a process's stages, so that a rebalance cannot stall silently.
///
/// With eager assignment a member has no partitions while a rebalance is under way; a rebalance that does not
/// complete, or one that leaves partitions to nobody, shows as a member without partitions for long. So a member
/// without partitions for longer than `bound` is *stalled* — unless its group has more members than the fewest
/// partitions of its topics, which makes it an idle extra replica (nothing to do, nothing wrong). When the group
/// cannot be described, a member without partitions past the bound is reported stalled too: idle and stalled
/// cannot be told apart, and the one that matters is the stall. A stall is reported by `iap_group_stalled{group}`
/// (1), an error log line when it begins (info when it ends), and readiness false with the reason.
/// Generic over `Clock` so that tests drive time.
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

    private let consumers: [KafkaConsumer]
    private let members: @Sendable (KafkaConsumer) throws -> Int
    private let configuration: Configuration
    private let clock: C
    private let logger: Logger
    private let metrics: MetricsRegistry
    private let state = Mutex<(statuses: [String: Status], stopping: Bool)>(([:], false))

    /// - Parameter members: how many members a consumer's group has (blocking); by default the coordinator's description.
    ///   (librdkafka 2.8's DescribeConsumerGroups hangs its main thread on a broker without the API, such as its own mock
    ///   cluster: tests there say how many members there are.)
    public init(consumers: [KafkaConsumer], configuration: Configuration = Configuration(), clock: C, logger: Logger, metrics: MetricsRegistry,
                members: @escaping @Sendable (KafkaConsumer) throws -> Int = { try $0.groupMemberCount() }) {
        self.consumers = consumers
        self.members = members
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

    /// Not ready while a group is stalled (the reason names it) or still joining; nil otherwise.
    public var readiness: Readiness? {
        state.withLock { state in
            for consumer in consumers {
                switch state.statuses[consumer.groupID] {
                case .stalled(let reason): return .notReady(reason)
                case .joining: return .notReady("no partitions assigned to \(consumer.groupID) yet")
                case .assigned, .idle, nil: continue
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
            let members = self.members
            let (memberCount, counts) = try await onOwnThread { (try members(consumer), try consumer.subscribedPartitionCounts()) }
            let partitions = counts.values.min() ?? 0
            if partitions > 0 && memberCount > partitions { return .idle(members: memberCount, partitions: partitions) }
            return .stalled("\(consumer.groupID): no partitions for \(seconds) s, though the group has \(memberCount) member(s) "
                            + "for \(partitions) partition(s) per topic: a rebalance that does not complete")
        } catch {
            return .stalled("\(consumer.groupID): no partitions for \(seconds) s, and the group cannot be described (\(error))")
        }
    }
}

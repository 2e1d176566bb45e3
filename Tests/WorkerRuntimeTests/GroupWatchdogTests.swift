import Foundation
import Kafka
import Metrics
import Synchronization
import Testing
import TestSupport
@testable import WorkerRuntime

/// A rebalance that cannot complete is reported within the bound; an idle extra replica is not a stall.
@Suite(.timeLimit(.minutes(3)))
struct GroupWatchdogTests {
    /// - Parameters:
    ///   - members: the member ids of a stable group to describe; nil: as the workers ask the cluster (the local broker).
    ///     The mock cluster cannot describe groups.
    ///   - rejoin: what a stalled member does; by default nothing here, so that a test sees the stall stay.
    static func watchdog(_ consumers: [KafkaConsumer], bound: Duration, metrics: MetricsRegistry, servers: String,
                         members: [String]? = nil, rejoinsWhenStalled: Bool = true,
                         rejoin: @escaping @Sendable (KafkaConsumer) -> Void = { _ in }) throws -> GroupWatchdog<ContinuousClock> {
        var configuration = GroupWatchdog<ContinuousClock>.Configuration()
        configuration.bound = bound
        configuration.rejoinsWhenStalled = rejoinsWhenStalled
        configuration.interval = .milliseconds(200)
        let admin = try KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers]))
        var describe = GroupWatchdog<ContinuousClock>.describing(with: admin)
        if let members {
            let group = KafkaGroupDescription(state: "Stable", members: members.map { .init(memberID: $0, clientID: "c", assignment: []) })
            describe = { consumer in (group, try admin.metadata().topics.filter { consumer.topics.contains($0.key) }) }
        }
        return GroupWatchdog(consumers: consumers, configuration: configuration, clock: ContinuousClock(), logger: Logger(stage: "test", minimum: .error),
                             metrics: metrics, describe: describe, rejoin: rejoin)
    }

    /// On librdkafka's mock cluster, the group coordinator answers every JoinGroup "loading": the member never gets its
    /// partitions (the workers' own group settings), and the watchdog says so once the bound has passed.
    @Test func aGroupWhoseRebalanceNeverCompletesIsReportedStalledWithinTheBound() async throws {
        let bound = Duration.seconds(15) // the mock cluster's first join takes about 3 s (longer on a busy machine)
        // The control: on a cluster without faults the same member is assigned (about 3 s; longer on a busy machine).
        let healthy = try KafkaMockCluster(brokers: 1)
        try healthy.createTopic("in", partitions: 2)
        let control = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(healthy.bootstrapServers), groupID: uniqueName("g"), topics: ["in"]))
        let controlRunning = Task { try await control.run { _ in } }
        try await waitUntil("the control member is assigned") { !control.assignment.isEmpty }
        let controlWatchdog = try Self.watchdog([control], bound: bound, metrics: MetricsRegistry(), servers: healthy.bootstrapServers, members: ["m0"])
        await controlWatchdog.look(at: control)
        #expect(controlWatchdog.status(of: control.groupID) == .assigned)
        control.triggerGracefulShutdown()
        try await controlRunning.value

        let cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic("in", partitions: 2)
        cluster.pushRequestErrors(.joinGroup, Array(repeating: .coordinatorLoadInProgress, count: 5_000))
        let started = ContinuousClock.now
        let consumer = try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(cluster.bootstrapServers), groupID: uniqueName("g"), topics: ["in"]))
        let running = Task { try await consumer.run { _ in } }
        let metrics = MetricsRegistry()
        // One member (this one) for two partitions: it should have them.
        let watchdog = try Self.watchdog([consumer], bound: bound, metrics: metrics, servers: cluster.bootstrapServers, members: ["m0"])
        let watching = Task { try await watchdog.run() }

        try await waitUntil("the watchdog saw the member joining") { watchdog.status(of: consumer.groupID) == .joining }
        #expect(watchdog.readiness?.isReady == false)
        try await waitUntil("the stall is reported", timeout: .seconds(30)) {
            if case .stalled = watchdog.status(of: consumer.groupID) { return true }
            return false
        }
        let reportedAfter = ContinuousClock.now - started
        #expect(reportedAfter >= bound && reportedAfter < bound + .seconds(10), "reported \(reportedAfter) after the start, bound \(bound)")
        #expect(metrics.value("iap_group_stalled", ["group": consumer.groupID]) == 1)
        #expect(watchdog.readiness?.reason.contains(consumer.groupID) == true, "readiness names the stalled group")
        #expect(consumer.assignment.isEmpty)

        watchdog.triggerGracefulShutdown()
        try await watching.value
        consumer.triggerGracefulShutdown()
        try await running.value
    }

    /// On the local broker: two members for one partition. The one without it is idle, not stalled, and ready; the
    /// other is assigned.
    @Test(TestServices.broker) func anIdleExtraReplicaIsNotAStall() async throws {
        let servers = try TestServices.requireBrokers()
        let topic = uniqueName("idle")
        let group = uniqueName("g")
        try await KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).createTopics([topic], partitions: 1)
        let consumers = try (0..<2).map { _ in try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: [topic])) }
        let tasks = consumers.map { consumer in Task { try await consumer.run { _ in } } }
        try await waitUntil("one member owns the partition") { consumers.map(\.assignment.count).sorted() == [0, 1] }
        let idle = try #require(consumers.first { $0.assignment.isEmpty })
        let metrics = MetricsRegistry()
        let watchdog = try Self.watchdog([idle], bound: .seconds(1), metrics: metrics, servers: servers)
        let watching = Task { try await watchdog.run() }
        try await waitUntil("the extra member is judged") { watchdog.status(of: group).map { $0 != .joining } ?? false }
        #expect(watchdog.status(of: group) == .idle(members: 2, partitions: 1))
        #expect(watchdog.readiness == nil, "an idle extra replica is ready")
        #expect(metrics.value("iap_group_stalled", ["group": group]) == 0)
        watchdog.triggerGracefulShutdown()
        try await watching.value
        consumers.forEach { $0.triggerGracefulShutdown() }
        for task in tasks { try await task.value }
    }

    /// On the local broker: two members split four partitions. Told the truth (two members), the watched member's two
    /// are its `range` share (the formula matches librdkafka's assignor); told it is the group's only member, its two
    /// are not its share of all four: stalled past the bound, and it rejoins, once per bound.
    @Test(TestServices.broker) func aMemberWhoseShareDoesNotMatchItsGroupIsStalledAndRejoins() async throws {
        let servers = try TestServices.requireBrokers()
        let topic = uniqueName("share")
        let group = uniqueName("g")
        try await KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).createTopics([topic], partitions: 4)
        let consumers = try (0..<2).map { _ in try KafkaConsumer(configuration: .init(kafka: testConsumerKafka(servers), groupID: group, topics: [topic])) }
        let tasks = consumers.map { consumer in Task { try await consumer.run { _ in } } }
        try await waitUntil("each member owns two partitions") { consumers.map(\.assignment.count) == [2, 2] }
        let watched = consumers[0]
        let bound = Duration.seconds(3)

        let truthful = try Self.watchdog([watched], bound: bound, metrics: MetricsRegistry(), servers: servers)
        try await waitUntil("the coordinator counts both members") {
            try KafkaAdmin(kafka: KafkaConfiguration(["bootstrap.servers": servers])).describeGroup(group).members.count == 2
        }
        await truthful.look(at: watched)
        #expect(truthful.status(of: group) == .assigned)

        let rejoins = Mutex(0)
        let metrics = MetricsRegistry()
        let memberID = try #require(watched.memberID)
        let lied = try Self.watchdog([watched], bound: bound, metrics: metrics, servers: servers, members: [memberID],
                                     rejoin: { _ in rejoins.withLock { $0 += 1 } })
        let started = ContinuousClock.now
        await lied.look(at: watched)
        #expect(lied.status(of: group) == .assigned, "not before the bound")
        try await waitUntil("the mismatch is reported") {
            await lied.look(at: watched)
            if case .stalled = lied.status(of: group) { return true }
            return false
        }
        #expect(ContinuousClock.now - started >= bound)
        let held = watched.assignment.map(\.partition).sorted().map(String.init).joined(separator: ",")
        #expect(lied.readiness?.reason.contains("held [\(held)] of \(topic)'s 4, its share being [0,1,2,3]") == true, "\(String(describing: lied.readiness))")
        #expect(metrics.value("iap_group_stalled", ["group": group]) == 1)
        await lied.look(at: watched)
        #expect(rejoins.withLock { $0 } == 1, "one rejoin per bound")
        #expect(metrics.value("iap_group_rejoins_total", ["group": group]) == 1)

        // With the rejoin turned off (`--rejoin-stalled-group false`), the same stall is reported and nothing else.
        let reportOnly = try Self.watchdog([watched], bound: bound, metrics: MetricsRegistry(), servers: servers, members: [memberID],
                                           rejoinsWhenStalled: false, rejoin: { _ in rejoins.withLock { $0 += 1 } })
        try await waitUntil("the mismatch is reported without a rejoin") {
            await reportOnly.look(at: watched)
            if case .stalled = reportOnly.status(of: group) { return true }
            return false
        }
        await reportOnly.look(at: watched)
        #expect(rejoins.withLock { $0 } == 1, "no rejoin when it is turned off")
        #expect(reportOnly.readiness != nil, "the stall stays reported: nothing was done that could have ended it")
        consumers.forEach { $0.triggerGracefulShutdown() }
        for task in tasks { try await task.value }
    }
}
